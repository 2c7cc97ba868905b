(* Hand-written glue of the oracle (trusted, not verified): the float
   instance of the ScalarOps record, JSON-lines parsing and printing, and the
   loops over batch and heads.  Every number in a response is computed by
   the functions extracted from rocq/ (Attention_spec); see README.md. *)

open Attention_spec

(* The float instance of [ScalarOps] (rocq/ScalarOps.v).  [exp] and [log]
   are the C library's; [<] on floats is IEEE: false when either side is
   NaN. *)
let float_ops : float scalarOps = {
  sc_zero = 0.0;
  sc_one = 1.0;
  sc_add = ( +. );
  sc_sub = ( -. );
  sc_mul = ( *. );
  sc_div = ( /. );
  sc_exp = Float.exp;
  sc_ln = Float.log;
  sc_ltb = (fun (a : float) (b : float) -> a < b);
}

exception Bad_request of string

let fail fmt = Printf.ksprintf (fun s -> raise (Bad_request s)) fmt

(* ---- Parsing ---------------------------------------------------------- *)

(* Sizes of the named dimensions (B, H, Sq, Sk, E, Ev) of one request, and
   the field that fixed each of them, so that every tensor is checked against
   the others. *)
type dims = (string, int * string) Hashtbl.t

(* One level of a nested list: dimension [names.(k)] of tensor [field]. *)
let level (dims : dims) field names k child path (j : Yojson.Safe.t) =
  match j with
  | `List l ->
    let n = List.length l and name = names.(k) in
    if n = 0 then
      fail "%s: dimension %s is empty at %s (every size must be >= 1)" field name path;
    (match Hashtbl.find_opt dims name with
     | None -> Hashtbl.add dims name (n, field)
     | Some (e, from) when e <> n ->
       fail "%s: dimension %s has length %d at %s, expected %d (as in %s)"
         field name n path e from
     | Some _ -> ());
    List.mapi (fun i x -> child (Printf.sprintf "%s[%d]" path i) x) l
  | _ -> fail "%s: expected a list at %s" field path

let number field path (j : Yojson.Safe.t) =
  match j with
  | `Float x when Float.is_finite x -> x
  | `Float _ ->
    fail "%s: non-finite number at %s (JSON cannot carry NaN or infinities)" field path
  | `Int i -> float_of_int i
  | `Intlit s -> float_of_string s
  | _ -> fail "%s: expected a number at %s" field path

let boolean field path (j : Yojson.Safe.t) =
  match j with
  | `Bool b -> b
  | _ -> fail "%s: expected a boolean at %s" field path

(* A [B][H][x][y] tensor whose dimensions are named [names]. *)
let tensor4 dims field names leaf j =
  let lv k child = level dims field names k child in
  lv 0 (lv 1 (lv 2 (lv 3 (leaf field)))) field j

type request = {
  query : float list list list list;
  key : float list list list list;
  value : float list list list list;
  scale : float;
  is_causal : bool;
  window : int option;
  attn_mask : bool list list list list option;
  block_size : int;
  grad_out : float list list list list option;
}

let known_fields =
  [ "op"; "query"; "key"; "value"; "scale"; "is_causal"; "window";
    "attn_mask"; "block_size"; "grad_out" ]

let parse_request (j : Yojson.Safe.t) : request =
  let fields = match j with
    | `Assoc l -> l
    | _ -> fail "request: expected a JSON object"
  in
  List.iter (fun (name, _) ->
      if not (List.mem name known_fields) then fail "%s: unknown field" name)
    fields;
  let field name = List.assoc_opt name fields in
  (match field "op" with
   | Some (`String "attention") -> ()
   | Some (`String op) -> fail "op: unknown operation %S" op
   | Some _ -> fail "op: expected a string"
   | None -> fail "op: missing");
  let dims : dims = Hashtbl.create 8 in
  let required name = match field name with
    | Some x -> x
    | None -> fail "%s: missing" name
  in
  let optional name parse = match field name with
    | None | Some `Null -> None
    | Some x -> Some (parse x)
  in
  let query = tensor4 dims "query" [| "B"; "H"; "Sq"; "E" |] number (required "query") in
  let key = tensor4 dims "key" [| "B"; "H"; "Sk"; "E" |] number (required "key") in
  let value = tensor4 dims "value" [| "B"; "H"; "Sk"; "Ev" |] number (required "value") in
  let attn_mask =
    optional "attn_mask" (tensor4 dims "attn_mask" [| "B"; "H"; "Sq"; "Sk" |] boolean) in
  let grad_out =
    optional "grad_out" (tensor4 dims "grad_out" [| "B"; "H"; "Sq"; "Ev" |] number) in
  let scale = number "scale" "scale" (required "scale") in
  let is_causal = match field "is_causal" with
    | None | Some `Null -> false
    | Some (`Bool b) -> b
    | Some _ -> fail "is_causal: expected a boolean"
  in
  let window = optional "window" (function
      | `Int w when w >= 1 -> w
      | _ -> fail "window: expected an integer >= 1 or null")
  in
  let block_size = match required "block_size" with
    | `Int b when b >= 1 -> b
    | _ -> fail "block_size: expected an integer >= 1"
  in
  { query; key; value; scale; is_causal; window; attn_mask; block_size; grad_out }

(* ---- Computation: every number comes from the extracted functions -------- *)

let ev_of r = List.length (List.hd (List.hd (List.hd r.value)))

(* [f b h q k v mask dO] for every batch entry [b] and head [h]. *)
let per_head r f =
  List.mapi (fun b qb ->
      List.mapi (fun h q ->
          let at t = List.nth (List.nth t b) h in
          f (at r.key) (at r.value) (Option.map at r.attn_mask)
            (Option.map at r.grad_out) q)
        qb)
    r.query

let forward r =
  let d = ev_of r in
  per_head r (fun k v mask d_o q ->
      let visible = visibility r.is_causal r.window mask in
      let fwd = attention_forward float_ops r.block_size d r.scale visible q k v in
      let two = attention_two_pass float_ops d r.scale visible q k v in
      let grads = Option.map (fun d_o ->
          attention_backward float_ops r.scale visible q k v
            (List.map fst fwd) (List.map snd fwd) d_o) d_o
      in
      (fwd, two, grads))

(* ---- Printing ---------------------------------------------------------- *)

(* Finite floats with 17 significant digits (they round-trip); a non-finite
   result (only from overflow inside the computation) as NaN / Infinity /
   -Infinity, which Python's json module reads. *)
let add_float buf x =
  match Float.classify_float x with
  | FP_nan -> Buffer.add_string buf "NaN"
  | FP_infinite -> Buffer.add_string buf (if x > 0.0 then "Infinity" else "-Infinity")
  | _ -> Buffer.add_string buf (Printf.sprintf "%.17g" x)

let add_list add buf xs =
  Buffer.add_char buf '[';
  List.iteri (fun i x -> if i > 0 then Buffer.add_char buf ','; add buf x) xs;
  Buffer.add_char buf ']'

let add_lse buf = function
  | None -> Buffer.add_string buf "null"
  | Some x -> add_float buf x

let add_field buf first name add x =
  if not first then Buffer.add_char buf ',';
  Buffer.add_string buf (Printf.sprintf "%S:" name);
  add buf x

let response r =
  let res = forward r in
  let heads sel = List.map (List.map sel) res in
  let t3 = add_list (add_list (add_list add_float)) in
  let t4 = add_list t3 in
  let lse3 = add_list (add_list (add_list add_lse)) in
  let buf = Buffer.create 4096 in
  Buffer.add_char buf '{';
  add_field buf true "out" t4 (heads (fun (f, _, _) -> List.map fst f));
  add_field buf false "lse" lse3 (heads (fun (f, _, _) -> List.map snd f));
  add_field buf false "out_two_pass" t4 (heads (fun (_, t, _) -> List.map fst t));
  add_field buf false "lse_two_pass" lse3 (heads (fun (_, t, _) -> List.map snd t));
  if Option.is_some r.grad_out then begin
    let grad sel = List.map (List.filter_map (fun (_, _, g) -> Option.map sel g)) res in
    add_field buf false "grad_query" t4 (grad (fun ((dq, _), _) -> dq));
    add_field buf false "grad_key" t4 (grad (fun ((_, dk), _) -> dk));
    add_field buf false "grad_value" t4 (grad (fun (_, dv) -> dv))
  end;
  Buffer.add_char buf '}';
  Buffer.contents buf

(* ---- linear_cross_entropy (rocq/CrossEntropy/Definitions.v) ------------- *)

type ce_request = {
  lce_input : float list list;          (* [N][D] *)
  lce_weight : float list list;         (* [V][D] *)
  lce_bias : float list option;         (* [V] *)
  lce_target : int list;                (* [N] *)
  lce_config : float ce_config;
  lce_token_chunk : int;
  lce_vocab_chunk : int;
  lce_grad_output : float list;         (* [N] for "none", [1] otherwise *)
}

let ce_known_fields =
  [ "op"; "input"; "linear_weight"; "linear_bias"; "target"; "ignore_index";
    "reduction"; "label_smoothing"; "z_loss"; "softcap"; "token_chunk";
    "vocab_chunk"; "grad_output" ]

(* Class indices and ignore_index: integers of magnitude below 2^53 (far from
   the overflow of the [Z] -> [int] mapping of [ExtrOcamlZInt]). *)
let small_int field path (j : Yojson.Safe.t) =
  match j with
  | `Int i when abs i < 1 lsl 53 -> i
  | _ -> fail "%s: expected an integer of magnitude below 2^53 at %s" field path

let parse_ce_request fields : ce_request =
  List.iter (fun (name, _) ->
      if not (List.mem name ce_known_fields) then fail "%s: unknown field" name)
    fields;
  let field name = List.assoc_opt name fields in
  let required name = match field name with
    | Some x -> x
    | None -> fail "%s: missing" name
  in
  let dims : dims = Hashtbl.create 4 in
  let tensor1 field names leaf j = level dims field names 0 (leaf field) field j in
  let tensor2 field names leaf j =
    let lv k child = level dims field names k child in
    lv 0 (lv 1 (leaf field)) field j
  in
  let input = tensor2 "input" [| "N"; "D" |] number (required "input") in
  let weight = tensor2 "linear_weight" [| "V"; "D" |] number (required "linear_weight") in
  let bias = match field "linear_bias" with
    | None | Some `Null -> None
    | Some j -> Some (tensor1 "linear_bias" [| "V" |] number j)
  in
  let target = tensor1 "target" [| "N" |] small_int (required "target") in
  let ignore_index = match field "ignore_index" with
    | None -> -100
    | Some j -> small_int "ignore_index" "ignore_index" j
  in
  let v = List.length weight in
  List.iteri (fun i t ->
      if t <> ignore_index && (t < 0 || t >= v) then
        fail "target: %d at target[%d] is neither a class in [0, %d) nor ignore_index %d"
          t i v ignore_index)
    target;
  let reduction = match field "reduction" with
    | None | Some (`String "mean") -> Red_mean
    | Some (`String "sum") -> Red_sum
    | Some (`String "none") -> Red_none
    | Some _ -> fail "reduction: expected \"none\", \"sum\" or \"mean\""
  in
  let scalar name default = match field name with
    | None -> default
    | Some j -> number name name j
  in
  let softcap = match field "softcap" with
    | None | Some `Null -> None
    | Some j ->
      let c = number "softcap" "softcap" j in
      if c <= 0.0 then fail "softcap: expected a number > 0 or null";
      Some c
  in
  let chunk_size name = match required name with
    | `Int b when b >= 1 -> b
    | _ -> fail "%s: expected an integer >= 1" name
  in
  let n = List.length input in
  let grad_output = match field "grad_output", reduction with
    | (None | Some `Null), Red_none -> List.init n (fun _ -> 1.0)
    | (None | Some `Null), _ -> [ 1.0 ]
    | Some j, Red_none -> tensor1 "grad_output" [| "N" |] number j
    | Some j, _ -> [ number "grad_output" "grad_output" j ]
  in
  { lce_input = input; lce_weight = weight; lce_bias = bias; lce_target = target;
    lce_config = { ce_ignore_index = ignore_index;
                   ce_smoothing = scalar "label_smoothing" 0.0;
                   ce_z_loss = scalar "z_loss" 0.0;
                   ce_softcap = softcap; ce_reduction = reduction };
    lce_token_chunk = chunk_size "token_chunk"; lce_vocab_chunk = chunk_size "vocab_chunk";
    lce_grad_output = grad_output }

(* [ce_forward], [ce_output] and [ce_backward] (fed with the forward's
   accumulators) of rocq/CrossEntropy/Definitions.v. *)
let ce_response r =
  let cfg = r.lce_config and bt = r.lce_token_chunk and bv = r.lce_vocab_chunk in
  let fa = ce_forward float_ops cfg bt bv r.lce_input r.lce_weight r.lce_bias r.lce_target in
  let (gin, gw), gb =
    ce_backward float_ops cfg bt bv r.lce_input r.lce_weight r.lce_bias r.lce_target fa
      r.lce_grad_output
  in
  let t1 = add_list add_float in
  let t2 = add_list t1 in
  let buf = Buffer.create 4096 in
  Buffer.add_char buf '{';
  (match cfg.ce_reduction, ce_output float_ops cfg fa with
   | (Red_sum | Red_mean), [ loss ] -> add_field buf true "loss" add_float loss
   | _, losses -> add_field buf true "loss" t1 losses);
  add_field buf false "lse" t1 fa.fa_lses;
  add_field buf false "grad_input" t2 gin;
  add_field buf false "grad_weight" t2 gw;
  add_field buf false "grad_bias" t1 gb;
  Buffer.add_char buf '}';
  Buffer.contents buf

(* The response to a request, by its "op". *)
let dispatch (j : Yojson.Safe.t) =
  match j with
  | `Assoc fields when List.assoc_opt "op" fields = Some (`String "linear_cross_entropy") ->
    ce_response (parse_ce_request fields)
  | _ -> response (parse_request j)

let error msg = Yojson.Safe.to_string (`Assoc [ ("error", `String msg) ])

let answer line =
  match Yojson.Safe.from_string line with
  | exception Yojson.Json_error msg -> error ("invalid JSON: " ^ msg)
  | j ->
    match dispatch j with
    | s -> s
    | exception Bad_request msg -> error msg
    | exception Stack_overflow -> error "internal: stack overflow (request too large)"
    | exception Out_of_memory -> error "internal: out of memory (request too large)"

let () =
  let rec loop () =
    match input_line stdin with
    | exception End_of_file -> ()
    | line ->
      if String.trim line <> "" then begin
        print_string (answer line);
        print_char '\n';
        flush stdout
      end;
      loop ()
  in
  loop ()
