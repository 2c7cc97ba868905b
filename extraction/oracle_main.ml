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

(* [x] and [x][y] tensors whose dimensions are named [names]. *)
let tensor1 dims field names leaf j = level dims field names 0 (leaf field) field j

let tensor2 dims field names leaf j =
  let lv k child = level dims field names k child in
  lv 0 (lv 1 (leaf field)) field j

(* The fields of a request object checked against [known]: [field name] is the
   value if present, [required name] fails when it is missing. *)
let request_fields known fields =
  List.iter (fun (name, _) ->
      if not (List.mem name known) then fail "%s: unknown field" name)
    fields;
  let field name = List.assoc_opt name fields in
  let required name = match field name with
    | Some x -> x
    | None -> fail "%s: missing" name
  in
  field, required

type request = {
  query : float list list list list;
  key : float list list list list;
  value : float list list list list;
  scale : float;
  is_causal : bool;
  window : int option;
  attn_mask : bool list list list list option;
  attn_bias : float option list list list list option;  (* None = -inf *)
  block_size : int;
  grad_out : float list list list list option;
}

let known_fields =
  [ "op"; "query"; "key"; "value"; "scale"; "is_causal"; "window";
    "attn_mask"; "attn_bias"; "block_size"; "grad_out" ]

let parse_request (j : Yojson.Safe.t) : request =
  let fields = match j with
    | `Assoc l -> l
    | _ -> fail "request: expected a JSON object"
  in
  let field, required = request_fields known_fields fields in
  (match field "op" with
   | Some (`String "attention") -> ()
   | Some (`String op) -> fail "op: unknown operation %S" op
   | Some _ -> fail "op: expected a string"
   | None -> fail "op: missing");
  let dims : dims = Hashtbl.create 8 in
  let optional name parse = match field name with
    | None | Some `Null -> None
    | Some x -> Some (parse x)
  in
  let query = tensor4 dims "query" [| "B"; "H"; "Sq"; "E" |] number (required "query") in
  let key = tensor4 dims "key" [| "B"; "Hkv"; "Sk"; "E" |] number (required "key") in
  let value = tensor4 dims "value" [| "B"; "Hkv"; "Sk"; "Ev" |] number (required "value") in
  let hq = List.length (List.hd query) and hkv = List.length (List.hd key) in
  if hkv = 0 || hq mod hkv <> 0 then
    fail "key: %d key/value heads do not divide the %d query heads" hkv hq;
  let attn_mask =
    optional "attn_mask" (tensor4 dims "attn_mask" [| "B"; "H"; "Sq"; "Sk" |] boolean) in
  let attn_bias =
    optional "attn_bias" (tensor4 dims "attn_bias" [| "B"; "H"; "Sq"; "Sk" |] (fun field path -> function
        | `Null -> None
        | j -> Some (number field path j))) in
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
  { query; key; value; scale; is_causal; window; attn_mask; attn_bias; block_size; grad_out }

(* ---- Computation: every number comes from the extracted functions -------- *)

let ev_of r = List.length (List.hd (List.hd (List.hd r.value)))

(* For every batch entry: [gqa_forward] (query head [h] reads key/value head
   [h / G], rocq/Attention/GroupedQuery.v), the two-pass specification on the
   repeated key/value heads ([mha_two_pass], [repeat_kv]) and, with [grad_out],
   [gqa_backward] (dQ per query head, dK and dV per key/value head). *)
type grads =
  | Qkv of float list list list * float list list list * float list list list
  | Mask of float list list list

let forward r =
  let d = ev_of r in
  let g = List.length (List.hd r.query) / List.length (List.hd r.key) in
  List.mapi (fun b qb ->
      let kb = List.nth r.key b and vb = List.nth r.value b in
      let at t h = List.nth (List.nth t b) h in
      let vis h = visibility r.is_causal r.window (Option.map (fun m -> at m h) r.attn_mask) in
      match r.attn_bias with
      | None ->
        let fwd = gqa_forward float_ops r.block_size d g r.scale vis qb kb vb in
        let two = mha_two_pass float_ops d r.scale vis qb (repeat_kv g kb) (repeat_kv g vb) in
        let grads = Option.map (fun d_o ->
            let (dq, dk), dv = gqa_backward float_ops r.block_size d g r.scale vis qb kb vb (List.nth d_o b) in
            Qkv (dq, dk, dv)) r.grad_out in
        (fwd, two, grads)
      | Some bias ->
        (* A float mask (rocq/Attention/AdditiveMask.v): [float_mask] per query
           head, key/value head [kv_head g h]; its two-pass specification
           [attention_two_pass_bias] on the finite entries; with [grad_out] the
           mask's gradient [attention_dbias] (no theorem states the whole-head
           dQ / dK / dV under a bias: not computed). *)
        let per_head h q =
          let k = List.nth kb (kv_head g h) and v = List.nth vb (kv_head g h) in
          let m i j = List.nth (List.nth (at bias h) i) j in
          let vis' i j = vis h i j && mask_finite m i j in
          let fwd = float_mask float_ops r.block_size d r.scale (vis h) m q k v in
          let two = attention_two_pass_bias float_ops d r.scale vis' (mask_bias float_ops m) q k v in
          let dbias = Option.map (fun d_o ->
              attention_dbias float_ops r.scale vis' (mask_bias float_ops m) q k v
                (List.map fst fwd) (List.map snd fwd) (at d_o h)) r.grad_out in
          (fwd, two, dbias) in
        let heads = List.mapi per_head qb in
        let sel f = List.map f heads in
        (sel (fun (f, _, _) -> f), sel (fun (_, t, _) -> t),
         Option.map (fun _ -> Mask (sel (fun (_, _, m) -> Option.get m))) r.grad_out))
    r.query

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
  let heads sel = List.map (fun (f, t, _) -> List.map sel (List.combine f t)) res in
  let t3 = add_list (add_list (add_list add_float)) in
  let t4 = add_list t3 in
  let lse3 = add_list (add_list (add_list add_lse)) in
  let buf = Buffer.create 4096 in
  Buffer.add_char buf '{';
  add_field buf true "out" t4 (heads (fun (f, _) -> List.map fst f));
  add_field buf false "lse" lse3 (heads (fun (f, _) -> List.map snd f));
  add_field buf false "out_two_pass" t4 (heads (fun (_, t) -> List.map fst t));
  add_field buf false "lse_two_pass" lse3 (heads (fun (_, t) -> List.map snd t));
  let grads = List.filter_map (fun (_, _, g) -> g) res in
  let qkv sel = List.map (function Qkv (dq, dk, dv) -> sel (dq, dk, dv) | Mask _ -> []) grads in
  (match grads with
   | Qkv _ :: _ ->
     add_field buf false "grad_query" t4 (qkv (fun (dq, _, _) -> dq));
     add_field buf false "grad_key" t4 (qkv (fun (_, dk, _) -> dk));
     add_field buf false "grad_value" t4 (qkv (fun (_, _, dv) -> dv))
   | Mask _ :: _ ->
     add_field buf false "grad_attn_mask" t4
       (List.map (function Mask m -> m | Qkv _ -> []) grads)
   | [] -> ());
  Buffer.add_char buf '}';
  Buffer.contents buf

(* ---- linear_cross_entropy (rocq/LinearCrossEntropy/Definitions.v) ------- *)

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
  let field, required = request_fields ce_known_fields fields in
  let dims : dims = Hashtbl.create 4 in
  let tensor1 field = tensor1 dims field and tensor2 field = tensor2 dims field in
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
   accumulators) of rocq/LinearCrossEntropy/Definitions.v. *)
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

(* ---- reversible (rocq/Reversible/) -------------------------------------- *)

(* The residual functions of the oracle's coupling stacks (glue, trusted): the
   tanh MLP x |-> W2 tanh(W1 x + b1) + b2, W1 [h][d], b1 [h], W2 [d][h], b2 [d],
   evaluated with the extracted [dot], [vadd], [weighted_sum] over [float_ops]
   and libm's [tanh]; and its vector-Jacobian product for
   [coupling_stack_backward].  The record also holds parameter gradients. *)
type mlp = { w1 : float list list; b1 : float list; w2 : float list list; b2 : float list }

let matvec w x = List.map (fun row -> dot float_ops row x) w

(* W^T v for W [m][n] and v [m]: sum_i v_i W_i. *)
let matvec_t w v = weighted_sum float_ops v w

let mlp_hidden m x = List.map Float.tanh (vadd float_ops (matvec m.w1 x) m.b1)

let mlp_apply m x = vadd float_ops (matvec m.w2 (mlp_hidden m x)) m.b2

(* (d/dx, d/dparams) of <dz, mlp x>: dh = W2^T dz, da = dh (1 - h^2),
   dx = W1^T da, dW1 = da x^T, db1 = da, dW2 = dz h^T, db2 = dz. *)
let mlp_vjp m x dz =
  let h = mlp_hidden m x in
  let da = List.map2 (fun d hi -> d *. (1.0 -. hi *. hi)) (matvec_t m.w2 dz) h in
  let outer u v = List.map (fun ui -> List.map (fun vj -> ui *. vj) v) u in
  (matvec_t m.w1 da, { w1 = outer da x; b1 = da; w2 = outer dz h; b2 = dz })

let mlp_add a b =
  let add2 = List.map2 (List.map2 ( +. )) in
  { w1 = add2 a.w1 b.w1; b1 = List.map2 ( +. ) a.b1 b.b1;
    w2 = add2 a.w2 b.w2; b2 = List.map2 ( +. ) a.b2 b.b2 }

(* Fixed point: states and increments are integers below 2^60 in magnitude,
   so every sum or difference of two of them stays below OCaml's 2^62. *)
let fixed_limit = 1 lsl 60

let fixed_int field path (j : Yojson.Safe.t) =
  match j with
  | `Int i when abs i < fixed_limit -> i
  | _ -> fail "%s: expected an integer of magnitude below 2^60 at %s" field path

(* Round half to even, as torch.round. *)
let round_half_even x =
  if Float.abs (x -. Float.trunc x) = 0.5 then 2.0 *. Float.round (x /. 2.0)
  else Float.round x

(* The integer residual [fixed_residual (2^k) round_half_even (mlp_apply m)]
   of rocq/Reversible/FixedPoint.v: dequantise, apply, scale, round. *)
let fixed_mlp name k m z =
  List.iter (fun zi -> if abs zi >= fixed_limit then
                fail "%s: input state %d reaches 2^60" name zi) z;
  let scale = Float.ldexp 1.0 k in
  List.map (fun v ->
      let r = round_half_even (v *. scale) in
      if not (Float.abs r < Float.ldexp 1.0 60) then
        fail "%s: increment %g * 2^%d is not finite or reaches 2^60" name v k;
      int_of_float r)
    (mlp_apply m (List.map (fun zi -> Float.ldexp (float_of_int zi) (-k)) z))

(* The input halves x1, x2 [N][d]: floats, or fixed-point integers with the
   fraction bits k ("int" mode). *)
type cs_input =
  | Float_rows of float list list * float list list
  | Int_rows of int * int list list * int list list

type cs_request = {
  cs_x : cs_input;
  cs_layers : (mlp * mlp) list;
  cs_grad : (float list list * float list list) option;
}

let cs_known_fields =
  [ "op"; "mode"; "fraction_bits"; "x1"; "x2"; "layers"; "grad_y1"; "grad_y2" ]

let parse_cs_request fields : cs_request =
  let field, required = request_fields cs_known_fields fields in
  let dims : dims = Hashtbl.create 8 in
  let tensor1 field = tensor1 dims field and tensor2 field = tensor2 dims field in
  let fraction_bits = match field "mode" with
    | None | Some (`String "float") ->
      if field "fraction_bits" <> None && field "fraction_bits" <> Some `Null then
        fail "fraction_bits: only in \"int\" mode";
      None
    | Some (`String "int") ->
      (match required "fraction_bits" with
       | `Int k when k >= 0 && k <= 60 -> Some k
       | _ -> fail "fraction_bits: expected an integer in [0, 60]")
    | Some _ -> fail "mode: expected \"float\" or \"int\""
  in
  let x = match fraction_bits with
    | None -> Float_rows (tensor2 "x1" [| "N"; "d" |] number (required "x1"),
                          tensor2 "x2" [| "N"; "d" |] number (required "x2"))
    | Some k -> Int_rows (k, tensor2 "x1" [| "N"; "d" |] fixed_int (required "x1"),
                          tensor2 "x2" [| "N"; "d" |] fixed_int (required "x2"))
  in
  let parse_mlp i fname (j : Yojson.Safe.t) =
    let name = Printf.sprintf "layers[%d].%s" i fname in
    let h = "h of " ^ name in
    match j with
    | `List [ w1; b1; w2; b2 ] ->
      { w1 = tensor2 (name ^ "[0] (W1)") [| h; "d" |] number w1;
        b1 = tensor1 (name ^ "[1] (b1)") [| h |] number b1;
        w2 = tensor2 (name ^ "[2] (W2)") [| "d"; h |] number w2;
        b2 = tensor1 (name ^ "[3] (b2)") [| "d" |] number b2 }
    | _ -> fail "%s: expected [W1, b1, W2, b2]" name
  in
  let layers = match required "layers" with
    | `List ls ->
      List.mapi (fun i l -> match l with
          | `Assoc fg ->
            List.iter (fun (n, _) -> if n <> "f" && n <> "g" then
                          fail "layers[%d].%s: unknown field" i n) fg;
            let fn n = match List.assoc_opt n fg with
              | Some j -> parse_mlp i n j
              | None -> fail "layers[%d].%s: missing" i n
            in
            let f = fn "f" in
            (f, fn "g")
          | _ -> fail "layers[%d]: expected an object {\"f\": ..., \"g\": ...}" i) ls
    | _ -> fail "layers: expected a list"
  in
  let grad = match field "grad_y1", field "grad_y2" with
    | (None | Some `Null), (None | Some `Null) -> None
    | Some g1, Some g2 when fraction_bits = None ->
      Some (tensor2 "grad_y1" [| "N"; "d" |] number g1, tensor2 "grad_y2" [| "N"; "d" |] number g2)
    | _ when fraction_bits <> None -> fail "grad_y1: gradients only in \"float\" mode"
    | _ -> fail "grad_y1: grad_y1 and grad_y2 go together"
  in
  { cs_x = x; cs_layers = layers; cs_grad = grad }

(* [stack_forward], [stack_inverse] (rocq/Reversible/Stack.v) per row over
   [list_group (scalar_group float_ops)] or [list_group z_group], and
   [coupling_stack_backward] (rocq/Reversible/Gradient.v) over floats with
   the MLPs' vector-Jacobian products; parameter gradients summed over rows. *)
let cs_response r =
  let buf = Buffer.create 4096 in
  let rows2 add xs = add_list (add_list add) buf xs in
  let put first name add xs =
    if not first then Buffer.add_char buf ',';
    Buffer.add_string buf (Printf.sprintf "%S:" name);
    rows2 add xs
  in
  let run group layers x1 x2 add =
    let rows = List.combine x1 x2 in
    let ys = List.map (stack_forward group layers) rows in
    let xs = List.map (stack_inverse group layers) ys in
    put true "y1" add (List.map fst ys);
    put false "y2" add (List.map snd ys);
    put false "x1" add (List.map fst xs);
    put false "x2" add (List.map snd xs);
    ys
  in
  Buffer.add_char buf '{';
  (match r.cs_x with
   | Int_rows (k, x1, x2) ->
     let layers = List.mapi (fun i (mf, mg) ->
         { layer_f = fixed_mlp (Printf.sprintf "layers[%d].f" i) k mf;
           layer_g = fixed_mlp (Printf.sprintf "layers[%d].g" i) k mg }) r.cs_layers in
     let add_int b i = Buffer.add_string b (string_of_int i) in
     ignore (run (list_group z_group) layers x1 x2 add_int)
   | Float_rows (x1, x2) ->
     let table = List.map (fun (mf, mg) ->
         ({ layer_f = mlp_apply mf; layer_g = mlp_apply mg }, (mf, mg))) r.cs_layers in
     let layers = List.map fst table in
     let group = list_group (scalar_group float_ops) in
     let ys = run group layers x1 x2 add_float in
     Option.iter (fun (g1, g2) ->
         let vf l = mlp_vjp (fst (List.assq l table)) in
         let vg l = mlp_vjp (snd (List.assq l table)) in
         let back = List.map2 (fun y dy -> coupling_stack_backward group vf vg layers y dy)
             ys (List.combine g1 g2) in
         put false "grad_x1" add_float (List.map (fun ((_, (d1, _)), _) -> d1) back);
         put false "grad_x2" add_float (List.map (fun ((_, (_, d2)), _) -> d2) back);
         let sum = match List.map snd back with
           | first :: rest ->
             List.fold_left (List.map2 (fun (af, ag) (bf, bg) -> (mlp_add af bf, mlp_add ag bg)))
               first rest
           | [] -> []
         in
         let add_mlp b m =
           let m2 = add_list (add_list add_float) and m1 = add_list add_float in
           Buffer.add_char b '['; m2 b m.w1; Buffer.add_char b ','; m1 b m.b1;
           Buffer.add_char b ','; m2 b m.w2; Buffer.add_char b ','; m1 b m.b2;
           Buffer.add_char b ']'
         in
         Buffer.add_string buf ",\"grad_layers\":";
         add_list (fun b (gf, gg) ->
             Buffer.add_string b "{\"f\":"; add_mlp b gf;
             Buffer.add_string b ",\"g\":"; add_mlp b gg; Buffer.add_char b '}')
           buf sum)
       r.cs_grad);
  Buffer.add_char buf '}';
  Buffer.contents buf

(* ---- in_backward (rocq/InBackward/UpdateRules.v) ------------------------ *)

(* The float instance of [OptOps]: [sqrt] is IEEE (correctly rounded), [pow]
   the C library's (as Python's [beta ** step] of the bias correction, with
   the step as a float), [fma] the IEEE fused multiply-add. *)
let float_opt_ops : float optOps = {
  oo_sc = float_ops;
  oo_sqrt = Float.sqrt;
  oo_pow = (fun b t -> Float.pow b (float_of_int t));
  oo_fma = Float.fma;
}

(* A rule with its hyper-parameters and the state of the whole parameter. *)
type opt_rule =
  | Sgd of float sgd_config * float list option            (* momentum buffer [n] *)
  | Adamw of float adamw_config * int * float list * float list
      (* step, exp_avg [n], exp_avg_sq [n] *)

let opt_known_fields =
  [ "op"; "rule"; "lr"; "weight_decay"; "momentum"; "dampening"; "nesterov";
    "betas"; "eps"; "param"; "grad"; "state" ]

let opt_rule_fields = function
  | "sgd" -> [ "momentum"; "dampening"; "nesterov" ]
  | _ -> [ "betas"; "eps" ]

let parse_opt_request fields =
  let field, required = request_fields opt_known_fields fields in
  let rule = match required "rule" with
    | `String ("sgd" | "adamw" as r) -> r
    | _ -> fail "rule: expected \"sgd\" or \"adamw\""
  in
  List.iter (fun (name, _) ->
      if List.mem name (opt_rule_fields (if rule = "sgd" then "adamw" else "sgd")) then
        fail "%s: not a hyper-parameter of rule %S" name rule)
    fields;
  let scalar name = number name name (required name) in
  let dims : dims = Hashtbl.create 2 in
  let vector name j = level dims name [| "n" |] 0 (number name) name j in
  let param = vector "param" (required "param") in
  let grad = vector "grad" (required "grad") in
  let state_fields = match field "state" with
    | None | Some `Null -> None
    | Some (`Assoc l) -> Some l
    | Some _ -> fail "state: expected an object or null"
  in
  let state_field known name =
    match state_fields with
    | None -> None
    | Some l ->
      List.iter (fun (k, _) -> if not (List.mem k known) then
                    fail "state: unknown field %s for rule %S" k rule) l;
      List.assoc_opt name l
  in
  let state_vector name = match state_field (if rule = "sgd" then [ "momentum_buffer" ]
                                             else [ "step"; "exp_avg"; "exp_avg_sq" ]) name with
    | None | Some `Null -> None
    | Some j -> Some (level dims ("state." ^ name) [| "n" |] 0 (number ("state." ^ name))
                        ("state." ^ name) j)
  in
  let lr = scalar "lr" and weight_decay = scalar "weight_decay" in
  match rule with
  | "sgd" ->
    let momentum = match required "momentum" with
      | `Null -> None
      | j -> Some (number "momentum" "momentum" j)
    in
    let nesterov = boolean "nesterov" "nesterov" (required "nesterov") in
    let cfg = { sgd_lr = lr; sgd_momentum = momentum; sgd_dampening = scalar "dampening";
                sgd_weight_decay = weight_decay; sgd_nesterov = nesterov } in
    (Sgd (cfg, state_vector "momentum_buffer"), param, grad)
  | _ ->
    let beta1, beta2 = match required "betas" with
      | `List [ b1; b2 ] -> (number "betas" "betas[0]" b1, number "betas" "betas[1]" b2)
      | _ -> fail "betas: expected a list of two numbers"
    in
    let step = match state_field [ "step"; "exp_avg"; "exp_avg_sq" ] "step" with
      | None -> 0
      | Some (`Int t) when t >= 0 && t < 1 lsl 53 -> t
      | Some _ -> fail "state: step must be an integer >= 0"
    in
    let zeros = List.map (fun _ -> 0.0) param in
    let m = Option.value (state_vector "exp_avg") ~default:zeros in
    let v = Option.value (state_vector "exp_avg_sq") ~default:zeros in
    let cfg = { aw_lr = lr; aw_beta1 = beta1; aw_beta2 = beta2; aw_eps = scalar "eps";
                aw_weight_decay = weight_decay } in
    (Adamw (cfg, step, m, v), param, grad)

(* [sgd_update] / [adamw_update] applied to every element of the parameter. *)
let opt_response (rule, param, grad) =
  let t1 = add_list add_float in
  let buf = Buffer.create 1024 in
  Buffer.add_char buf '{';
  (match rule with
   | Sgd (cfg, bufs) ->
     let olds = match bufs with None -> List.map (fun _ -> None) param
                              | Some b -> List.map Option.some b in
     let res = List.map2 (fun (p, b) g -> sgd_update float_opt_ops cfg p b g)
         (List.combine param olds) grad in
     add_field buf true "param" t1 (List.map fst res);
     Buffer.add_string buf ",\"state\":{";
     (match List.filter_map snd res with   (* every element has a buffer, or none has *)
      | [] -> Buffer.add_string buf "\"momentum_buffer\":null"
      | bs -> add_field buf true "momentum_buffer" t1 bs);
     Buffer.add_char buf '}'
   | Adamw (cfg, step, m, v) ->
     let res = List.map2 (fun ((p, m), v) g ->
         adamw_update float_opt_ops cfg p { ad_step = step; ad_m = m; ad_v = v } g)
         (List.combine (List.combine param m) v) grad in
     add_field buf true "param" t1 (List.map fst res);
     Buffer.add_string buf ",\"state\":{";
     add_field buf true "step" (fun b t -> Buffer.add_string b (string_of_int t)) (step + 1);
     add_field buf false "exp_avg" t1 (List.map (fun (_, s) -> s.ad_m) res);
     add_field buf false "exp_avg_sq" t1 (List.map (fun (_, s) -> s.ad_v) res);
     Buffer.add_char buf '}');
  Buffer.add_char buf '}';
  Buffer.contents buf

(* ---- error_bounds (rocq/Bounds/) --------------------------------------- *)

(* Exact rationals: the strings "a/b" (or "a") of decimal integers, b > 0, to
   Coq's [Q] over Zarith's integers (extraction/ExtractBounds.v), and back. *)
let big_of_string field s =
  let ok = String.length s > 0 && String.for_all (fun c -> c = '-' || ('0' <= c && c <= '9')) s in
  match (if ok then Some (Big_int_Z.big_int_of_string s) else None) with
  | Some x -> x
  | None | exception _ -> fail "%s: %S is not a decimal integer" field s

let rational field (j : Yojson.Safe.t) : Bounds_spec.q =
  match j with
  | `String s ->
    let num, den = match String.index_opt s '/' with
      | None -> (s, "1")
      | Some i -> (String.sub s 0 i, String.sub s (i + 1) (String.length s - i - 1))
    in
    let den = big_of_string field den in
    if Big_int_Z.sign_big_int den <= 0 then fail "%s: the denominator must be > 0" field;
    { Bounds_spec.qnum = big_of_string field num; qden = den }
  | _ -> fail "%s: expected a rational \"num/den\" (a string)" field

let string_of_q (x : Bounds_spec.q) =
  Big_int_Z.string_of_big_int x.qnum ^ "/" ^ Big_int_Z.string_of_big_int x.qden

(* One query: the bound's name and its arguments, answered with a rational,
   a list of rationals (a pair, or four coefficients), null (the Coq [None]: a side condition fails)
   or a boolean. *)
let eb_known = [ "bound"; "u"; "ue"; "n"; "delta"; "b"; "t";
                 "ee"; "ea"; "us"; "es"; "uc"; "scale"; "p"; "v"; "e"; "block"; "keys"; "tiles";
                 "el"; "ucl"; "ln"; "zmax"; "depth"; "vocab";
                 "items"; "merge_depth"; "merge_block"; "merge_tiles"; "groups"; "a0"; "ua"; "x"; "chunks";
                 "chain"; "uc2"; "ucs"; "lse_max"; "dp_abs_sum"; "y_max"; "w"; "value_dim"; "grad_depth";
                 "cap"; "ut"; "et"; "ud"; "ed"; "zr"; "dr" ]

let eb_query i (j : Yojson.Safe.t) : Yojson.Safe.t =
  let where = Printf.sprintf "queries[%d]" i in
  let fields = match j with
    | `Assoc l -> l
    | _ -> fail "%s: expected an object" where
  in
  List.iter (fun (k, _) -> if not (List.mem k eb_known) then fail "%s.%s: unknown field" where k) fields;
  let required k = match List.assoc_opt k fields with
    | Some x -> x
    | None -> fail "%s.%s: missing" where k
  in
  let q k = rational (where ^ "." ^ k) (required k) in
  let nat k = match required k with
    | `Int n when n >= 0 && n < 1 lsl 53 -> Big_int_Z.big_int_of_int n
    | _ -> fail "%s.%s: expected an integer in [0, 2^53)" where k
  in
  let n () = nat "n" in
  let value = function None -> `Null | Some x -> `String (string_of_q x) in
  let allowed ks =
    List.iter (fun (k, _) -> if k <> "bound" && not (List.mem k ks) then
                  fail "%s.%s: not an argument of this bound" where k) fields in
  match required "bound" with
  | `String "gamma" -> allowed [ "u"; "n" ]; value (Bounds_spec.dot_bound_q (q "u") (n ()))
  | `String "chunked_sum_factor" ->
    allowed [ "u"; "n" ]; value (Some (Bounds_spec.chunked_sum_factor_q (q "u") (n ())))
  | `String "nat_err" -> allowed [ "u"; "n" ]; value (Some (Bounds_spec.nat_err_q (q "u") (n ())))
  | `String "stream_beta" ->
    allowed [ "u"; "ue"; "n" ]; value (Bounds_spec.stream_beta_q (q "u") (q "ue") (n ()))
  | `String "stream_err" ->
    allowed [ "u"; "ue"; "n" ]; value (Bounds_spec.stream_err_q (q "u") (q "ue") (n ()))
  | `String "perturbation" -> allowed [ "delta" ]; value (Bounds_spec.perturbation_q (q "delta"))
  | `String "neg_ln_check" -> allowed [ "b"; "t" ]; `Bool (Bounds_spec.neg_ln_check (q "b") (q "t"))
  | `String "attention_forward" ->
    allowed [ "u"; "ue"; "ee"; "ea"; "us"; "es"; "uc"; "scale"; "p"; "v"; "e"; "block"; "keys"; "tiles" ];
    value (Bounds_spec.attn_fwd_q (q "u") (q "ue") (q "ee") (q "ea") (q "us") (q "es") (q "uc") (q "scale")
             (q "p") (q "v") (nat "e") (nat "block") (nat "keys") (nat "tiles"))
  | `String "attention_forward_posteriori" ->
    allowed [ "u"; "ue"; "ee"; "ea"; "us"; "es"; "uc"; "scale"; "p"; "v"; "e"; "block"; "keys"; "tiles" ];
    (match Bounds_spec.attn_fwd_post_q (q "u") (q "ue") (q "ee") (q "ea") (q "us") (q "es") (q "uc") (q "scale")
             (q "p") (q "v") (nat "e") (nat "block") (nat "keys") (nat "tiles") with
     | None -> `Null
     | Some (r, a) -> `List [ `String (string_of_q r); `String (string_of_q a) ])
  | `String "score_max" ->
    allowed [ "u"; "ea"; "scale"; "uc"; "e"; "p" ];
    value (Some (Bounds_spec.score_max_q (q "u") (q "ea") (q "scale") (q "uc") (nat "e") (q "p")))
  | `String "score_delta" ->
    allowed [ "u"; "ea"; "scale"; "uc"; "e"; "p" ];
    value (Some (Bounds_spec.score_delta_q (q "u") (q "ea") (q "scale") (q "uc") (nat "e") (q "p")))
  | `String "attention_lse" ->
    allowed [ "u"; "ue"; "ee"; "ea"; "el"; "ucl"; "uc"; "scale"; "p"; "ln"; "e"; "block"; "keys"; "tiles" ];
    value (Bounds_spec.attn_lse_q (q "u") (q "ue") (q "ee") (q "ea") (q "el") (q "ucl") (q "uc") (q "scale")
             (q "p") (q "ln") (nat "e") (nat "block") (nat "keys") (nat "tiles"))
  | `String "attention_grad_chain" ->
    allowed [ "u"; "ue"; "ee"; "ea"; "us"; "es"; "uc"; "scale"; "p"; "v"; "el"; "ucl"; "ln"; "uc2"; "ucs";
              "lse_max"; "dp_abs_sum"; "y_max"; "w"; "e"; "block"; "keys"; "tiles"; "value_dim"; "grad_depth";
              "items" ];
    (match Bounds_spec.attn_grad_chain_q (q "u") (q "ue") (q "ee") (q "ea") (q "us") (q "es") (q "uc") (q "scale")
             (q "p") (q "v") (q "el") (q "ucl") (q "ln") (q "uc2") (q "ucs") (q "lse_max") (q "dp_abs_sum")
             (q "y_max") (q "w") (nat "e") (nat "block") (nat "keys") (nat "tiles") (nat "value_dim")
             (nat "grad_depth") (nat "items") with
     | None -> `Null
     | Some ((((((((c1, c2), c3), c0), cd), d0), d1), r), a) ->
       `List (List.map (fun c -> `String (string_of_q c)) [ c1; c2; c3; c0; cd; d0; d1; r; a ]))
  | `String "linear_cross_entropy_lse" ->
    allowed [ "u"; "ue"; "ee"; "ea"; "el"; "zmax"; "delta"; "ln"; "depth"; "block"; "tiles"; "vocab" ];
    value (Bounds_spec.ce_lse_q (q "u") (q "ue") (q "ee") (q "ea") (q "el") (q "zmax") (q "delta") (q "ln")
             (nat "depth") (nat "block") (nat "tiles") (nat "vocab"))
  | `String "linear_cross_entropy_merge_lse" ->
    allowed [ "u"; "ue"; "ee"; "ea"; "el"; "zmax"; "delta"; "ln"; "depth"; "block"; "tiles"; "items";
              "merge_depth"; "merge_block"; "merge_tiles"; "groups"; "vocab" ];
    value (Bounds_spec.ce_merge_lse_q (q "u") (q "ue") (q "ee") (q "ea") (q "el") (q "zmax") (q "delta") (q "ln")
             (nat "depth") (nat "block") (nat "tiles") (nat "items") (nat "merge_depth") (nat "merge_block")
             (nat "merge_tiles") (nat "groups") (nat "vocab"))
  | `String "linear_cross_entropy_grad" ->
    allowed [ "u"; "ea"; "us"; "es"; "ue"; "ee"; "a0"; "ua"; "x"; "n"; "chunks" ];
    (match Bounds_spec.ce_grad_q (q "u") (q "ea") (q "us") (q "es") (q "ue") (q "ee") (q "a0") (q "ua") (q "x")
             (n ()) (nat "chunks") with
     | None -> `Null
     | Some (((cs, ct), ch), c0) -> `List (List.map (fun c -> `String (string_of_q c)) [ cs; ct; ch; c0 ]))
  | `String "linear_cross_entropy_grad_chain" ->
    allowed [ "u"; "ea"; "us"; "es"; "ue"; "ee"; "el"; "zmax"; "delta"; "ln"; "a0"; "ua"; "depth"; "block";
              "tiles"; "vocab"; "n"; "chunks" ];
    (match Bounds_spec.ce_grad_chain_q (q "u") (q "ea") (q "us") (q "es") (q "ue") (q "ee") (q "el") (q "zmax")
             (q "delta") (q "ln") (q "a0") (q "ua") (nat "depth") (nat "block") (nat "tiles") (nat "vocab")
             (n ()) (nat "chunks") with
     | None -> `Null
     | Some (((cs, ct), ch), c0) -> `List (List.map (fun c -> `String (string_of_q c)) [ cs; ct; ch; c0 ]))
  | `String "linear_cross_entropy_grad_posteriori" ->
    allowed [ "u"; "ea"; "us"; "es"; "ee"; "a0"; "ua"; "n"; "chunks" ];
    (match Bounds_spec.ce_gp_q (q "u") (q "ea") (q "us") (q "es") (q "ee") (q "a0") (q "ua")
             (n ()) (nat "chunks") with
     | None -> `Null
     | Some (((cs, ct), ch), c0) -> `List (List.map (fun c -> `String (string_of_q c)) [ cs; ct; ch; c0 ]))
  | `String "linear_cross_entropy_grad_capped" ->
    allowed [ "u"; "ea"; "us"; "es"; "ue"; "ee"; "a0"; "ua"; "x"; "chain"; "n"; "chunks" ];
    (match Bounds_spec.sc_grad_q (q "u") (q "ea") (q "us") (q "es") (q "ue") (q "ee") (q "a0") (q "ua") (q "x")
             (q "chain") (n ()) (nat "chunks") with
     | None -> `Null
     | Some (((((cs, ct), ch), ck), cc), c0) ->
       `List (List.map (fun c -> `String (string_of_q c)) [ cs; ct; ch; ck; cc; c0 ]))
  | `String "linear_cross_entropy_softcap_grad_chain" ->
    allowed [ "u"; "ea"; "us"; "es"; "ue"; "ee"; "el"; "cap"; "ut"; "et"; "ud"; "ed"; "zr"; "dr"; "ln"; "a0";
              "ua"; "depth"; "block"; "tiles"; "vocab"; "n"; "chunks" ];
    (match Bounds_spec.sc_grad_chain_q (q "u") (q "ea") (q "us") (q "es") (q "ue") (q "ee") (q "el") (q "cap")
             (q "ut") (q "et") (q "ud") (q "ed") (q "zr") (q "dr") (q "ln") (q "a0") (q "ua") (nat "depth") (nat "block")
             (nat "tiles") (nat "vocab") (n ()) (nat "chunks") with
     | None -> `Null
     | Some (((((cs, ct), ch), ck), cc), c0) ->
       `List (List.map (fun c -> `String (string_of_q c)) [ cs; ct; ch; ck; cc; c0 ]))
  | `String b -> fail "%s.bound: unknown bound %S" where b
  | _ -> fail "%s.bound: expected a string" where

let eb_response fields =
  let _, required = request_fields [ "op"; "queries" ] fields in
  match required "queries" with
  | `List qs -> Yojson.Safe.to_string (`Assoc [ ("values", `List (List.mapi eb_query qs)) ])
  | _ -> fail "queries: expected a list"

(* The response to a request, by its "op". *)
let dispatch (j : Yojson.Safe.t) =
  match j with
  | `Assoc fields when List.assoc_opt "op" fields = Some (`String "linear_cross_entropy") ->
    ce_response (parse_ce_request fields)
  | `Assoc fields when List.assoc_opt "op" fields = Some (`String "reversible") ->
    cs_response (parse_cs_request fields)
  | `Assoc fields when List.assoc_opt "op" fields = Some (`String "in_backward") ->
    opt_response (parse_opt_request fields)
  | `Assoc fields when List.assoc_opt "op" fields = Some (`String "error_bounds") ->
    eb_response fields
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
