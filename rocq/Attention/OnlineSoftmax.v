(** * Online softmax: the streaming recurrence the attention code runs.

    One query row sees a list of keys.  A key is a pair (score, value row);
    its score is [None] when the key is masked (the code's score [-inf]).
    The keys arrive in tiles ("blocks"); for each tile the code computes

      m'  = max (m, max_j s_j)
      p_j = exp (s_j - m')              (0 for a masked key)
      l'  = exp (m - m') * l + sum_j p_j
      acc'= exp (m - m') * acc + sum_j p_j * v_j

    and finally [out = acc / l], [lse = m + ln l].  The state before any
    unmasked key is [None] (the code's m = -inf, l = 0, acc = 0).  A tile
    of size one is the key-by-key recurrence.

    This file holds the definitions only, over an abstract [ScalarOps];
    the theorems are in the files beside it.  *)

From Coq Require Import Reals List Arith.
From Ojas Require Import ScalarOps Vector.
Import ListNotations.

Record state (T : Type) : Type := mk_state {
  st_max : T;        (** running max m *)
  st_sum : T;        (** rescaled sum l = sum_j exp (s_j - m) *)
  st_acc : list T    (** rescaled accumulator acc = sum_j exp (s_j - m) v_j *)
}.
Arguments mk_state {T}. Arguments st_max {T}. Arguments st_sum {T}.
Arguments st_acc {T}.

Section OnlineSoftmax.
Context {T : Type} (o : ScalarOps T).

(** A key: its score ([None] if masked) and its value row. *)
Definition key : Type := (option T * list T)%type.

(** Max of two extended scores; [None] is -inf. *)
Definition omax (a b : option T) : option T :=
  match a, b with
  | None, _ => b
  | _, None => a
  | Some x, Some y => Some (sc_max o x y)
  end.

Definition block_max (blk : list key) : option T :=
  fold_left (fun m k => omax m (fst k)) blk None.

(** Weight of a key against the running max [m]: exp (s - m), or 0 if masked. *)
Definition key_weight (m : T) (k : key) : T :=
  match fst k with
  | None => sc_zero o
  | Some s => sc_exp o (sc_sub o s m)
  end.

(** One tile of the forward pass. *)
Definition block_step (st : option (state T)) (blk : list key) : option (state T) :=
  match omax (option_map st_max st) (block_max blk) with
  | None => st
  | Some m' =>
      let ps := map (key_weight m') blk in
      let l_blk := sc_sum o ps in
      let acc_blk := weighted_sum o ps (map snd blk) in
      match st with
      | None => Some (mk_state m' l_blk acc_blk)
      | Some st =>
          let alpha := sc_exp o (sc_sub o (st_max st) m') in
          Some (mk_state m'
                  (sc_add o (sc_mul o alpha (st_sum st)) l_blk)
                  (vadd o (vscale o alpha (st_acc st)) acc_blk))
      end
  end.

(** The forward pass over a list of tiles. *)
Definition stream (blocks : list (list key)) : option (state T) :=
  fold_left block_step blocks None.

(** Output row ([acc / l], or zeros for a fully masked row) and log-sum-exp
    ([m + ln l], or [None] = -inf for a fully masked row). *)
Definition finalize (d : nat) (st : option (state T)) : list T * option T :=
  match st with
  | None => (vzero o d, None)
  | Some s => (vdiv o (st_acc s) (st_sum s), Some (sc_add o (st_max s) (sc_ln o (st_sum s))))
  end.

(** Cut a list into tiles of [b] elements (the last one may be shorter);
    [b = 0] is read as [b = 1]. *)
Fixpoint chunk_fuel {A} (fuel b : nat) (xs : list A) : list (list A) :=
  match fuel with
  | O => []
  | S fuel' =>
      match xs with
      | [] => []
      | _ => firstn b xs :: chunk_fuel fuel' b (skipn b xs)
      end
  end.

Definition chunk {A} (b : nat) (xs : list A) : list (list A) :=
  chunk_fuel (length xs) (Nat.max 1 b) xs.

(** The streamed row with key tiles of size [b]. *)
Definition stream_row (b d : nat) (keys : list key) : list T * option T :=
  finalize d (stream (chunk b keys)).

(** ** The specification: two-pass softmax over the unmasked keys. *)

Definition unmasked (keys : list key) : list (T * list T) :=
  flat_map (fun k => match fst k with None => [] | Some s => [(s, snd k)] end) keys.

Definition list_max (x : T) (xs : list T) : T := fold_left (sc_max o) xs x.

(** out = sum_j exp (s_j - M) / Z * v_j with M = max_j s_j and
    Z = sum_j exp (s_j - M); lse = M + ln Z.  Zeros and -inf when every
    key is masked. *)
Definition two_pass (d : nat) (keys : list key) : list T * option T :=
  match unmasked keys with
  | [] => (vzero o d, None)
  | ((s0, _) :: _) as ks =>
      let M := list_max s0 (map fst ks) in
      let ws := map (fun k => sc_exp o (sc_sub o (fst k) M)) ks in
      let Z := sc_sum o ws in
      (weighted_sum o (map (fun w => sc_div o w Z) ws) (map snd ks), Some (sc_add o M (sc_ln o Z)))
  end.

(** ** Scores and masks of one attention head. *)

(** s_j = scale * (q . k_j) *)
Definition scores (scale : T) (q : list T) (ks : list (list T)) : list T :=
  map (fun k => sc_mul o scale (dot o q k)) ks.

(** Keys of query row [i]: key [j] is kept when [visible i j]. *)
Definition masked_keys (visible : nat -> bool) (ss : list T) (vs : list (list T)) : list key :=
  map (fun '(j, (s, v)) => (if visible j then Some s else None, v))
      (combine (seq 0 (length ss)) (combine ss vs)).

(** Forward pass of one head: for every query row, output and lse. *)
Definition attention_forward (b d : nat) (scale : T) (visible : nat -> nat -> bool)
    (qs ks vs : list (list T)) : list (list T * option T) :=
  map (fun '(i, q) => stream_row b d (masked_keys (visible i) (scores scale q ks) vs))
      (combine (seq 0 (length qs)) qs).

(** The same head computed by the two-pass specification. *)
Definition attention_two_pass (d : nat) (scale : T) (visible : nat -> nat -> bool)
    (qs ks vs : list (list T)) : list (list T * option T) :=
  map (fun '(i, q) => two_pass d (masked_keys (visible i) (scores scale q ks) vs))
      (combine (seq 0 (length qs)) qs).

End OnlineSoftmax.

(** ** Visibility predicates: query row [i], key column [j]. *)

(** [F.scaled_dot_product_attention]'s [is_causal]: the top-left-aligned
    lower triangle, key [j] is visible to query [i] iff [j <= i]. *)
Definition causal (i j : nat) : bool := Nat.leb j i.

(** Sliding window of [w] keys: |i - j| < w. *)
Definition in_window (w i j : nat) : bool := Nat.ltb (i - j) w && Nat.ltb (j - i) w.

(** An explicit boolean mask, row by row ([true] = takes part). *)
Definition explicit_mask (m : list (list bool)) (i j : nat) : bool :=
  nth j (nth i m []) false.

(** The visibility the code uses: the conjunction of the requested masks. *)
Definition visibility (is_causal : bool) (window : option nat)
    (mask : option (list (list bool))) (i j : nat) : bool :=
  (if is_causal then causal i j else true)
  && match window with None => true | Some w => in_window w i j end
  && match mask with None => true | Some m => explicit_mask m i j end.
