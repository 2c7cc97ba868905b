(** * The running dK / dQ bounds with the [dp] dot's error per item.

    [grad_error_acc_running_with] (RunningAccError.v) takes one uniform bound [eP]
    on the error of the kernel's [dp = dot (v_j, dO_i)] for every item; its
    [dk_error_acc_running], [dq_error_acc_running] take it from the dot model at
    the LARGEST [dot_abs v dO] of all pairs.  The item lemma
    [grad_acc_item_close] is per item, so the same proof holds with [eP x] per
    item: [grad_error_acc_running_pp] (RunningAccError.v's [grad_error_acc_running_items],
    of which [grad_error_acc_running_with] is the instance at a constant [eP]).  Its kernels' instances
    [dk_error_acc_running_pp], [dq_error_acc_running_pp] take any per-item bound
    [|pdot v dO - dot_R v dO| <= eP x] (the dot model at the pair's own
    [dot_abs]: [dm_eP_bound]; or the model's error computed on the data), no
    [dot_model] premise.  [eDm] still bounds the [eD x] inside [gacc_c], which
    now takes the item's [eP x].  The lse's error [Dl x] and the magnitude [Am x] of
    [s2 - lse2] are per item as in [grad_error_acc_running_with] (in dQ, of one query
    row, [Dl] is one number).  As there, the accumulating dot is any [acc_dot_split_model]
    and the running bound [run_err_split] of bounds [bp], [bt] meeting
    [running_split_premise].  Not covered: as [grad_error_acc_running_with]. *)

From Coq Require Import Reals List Lra.
From Ojas Require Import VectorFacts FloatModel.DotError FloatModel.MixedPrecision FloatModel.Notations Attention.BackwardCorrect.
From Ojas Require Import Attention.Float.ForwardError Attention.Float.NumeratorError.
From Ojas Require Import Attention.Float.DvError Attention.Float.DkDqError Attention.Float.RunningAccError.
Import ListNotations.
Open Scope R_scope.

Section GradPP.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Section GenericPP.

Variable T : Type.
Variable sdot : list R -> list R -> R.
Variables (qv kv : T -> list R) (l2 dp dl w : T -> R).

(** [grad_error_acc_running_with] with [eP x] per item. *)
Theorem grad_error_acc_running_pp : forall accf n g_acc g_dot g_abs vis c cs scale ucs (tiles : list (list T))
    (Lx dPx Dx eD delta X eP Dl Am : T -> R) eDm Ym W bp bt,
  acc_dot_split_model accf n g_acc g_dot g_abs -> Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ sdot c (qv x) (kv x) * ln 2 - scale * dot_R (qv x) (kv x)) <= delta x
     /\ Rabs (l2 x * ln 2 - Lx x) <= Dl x
     /\ Rabs (score2_with A_ sdot c (qv x) (kv x) - l2 x) <= Am x
     /\ Rpower 2 ((delta x + Dl x) / ln 2 + u * Am x + ea) <= X x
     /\ Rabs (dp x - dPx x) <= eP x
     /\ Rabs (dl x - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dPx x - Dx x) <= Ym /\ Rabs (w x) <= W) ->
  let E := fun x => (1 + ue) * X x in
  let Pr := fun x => exp (scale * dot_R (qv x) (kv x) - Lx x) in
  let Pd := fun x => if vis x then Pr x * (dPx x - Dx x) * w x else 0 in
  let h1 := fun x => Pr x * Rabs (dPx x - Dx x) * Rabs (w x) in
  let h2 := fun x => Pr x * ((1 + u) * (eP x + eD x) + ea) * Rabs (w x) in
  let rr := fun x => if vis x then gacc_A M (E x) * h1 x + gacc_B M (E x) * h2 x
                                   + gacc_c M (E x) Ym ((1 + u) * (eP x + eDm) + ea) W else 0 in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (dPx x - Dx x) * Rabs (w x) else 0) (concat tiles)) in
  running_split_premise Pd rr tiles bp bt ->
  Rabs (grad_kernel_acc_with M T sdot qv kv l2 dp dl w accf vis c cs tiles - scale * rsum (map Pd (concat tiles)))
  <= grad_bound M scale ucs (run_err_split g_acc g_dot g_abs bp bt + rsum (map rr (concat tiles))) S1.
Proof. exact (grad_error_acc_running_items M T sdot qv kv l2 dp dl w). Qed.


End GenericPP.

(** dK ([dk_kernel_acc]) with the error of [dp = pdot v dO_x] bounded per query row:
    [dk_error_acc_running] with [eP x] in place of the dot model's [gp_rel Pd + gp_abs]. *)
Theorem dk_error_acc_running_pp : forall (accf : R -> list R -> list R -> R) n g_acc g_dot g_abs
    (sdot pdot : list R -> list R -> R) vis c cs scale ucs k v e tiles
    (Lx Dx eD delta X eP Dl Am : (list R * list R) * (R * R) -> R) eDm Ym W bp bt,
  acc_dot_split_model accf n g_acc g_dot g_abs -> Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ sdot c k (fst (fst x)) * ln 2 - scale * dot_R k (fst (fst x))) <= delta x
     /\ Rabs (fst (snd x) * ln 2 - Lx x) <= Dl x
     /\ Rabs (score2_with A_ sdot c k (fst (fst x)) - fst (snd x)) <= Am x
     /\ Rpower 2 ((delta x + Dl x) / ln 2 + u * Am x + ea) <= X x
     /\ Rabs (pdot v (snd (fst x)) - dot_R v (snd (fst x))) <= eP x
     /\ Rabs (snd (snd x) - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dot_R v (snd (fst x)) - Dx x) <= Ym /\ Rabs (nth e (fst (fst x)) 0) <= W) ->
  let E := fun x => (1 + ue) * X x in
  let Pr := fun x => exp (scale * dot_R k (fst (fst x)) - Lx x) in
  let Y := fun x => dot_R v (snd (fst x)) - Dx x in
  let Gt := fun x => if vis x then Pr x * Y x * nth e (fst (fst x)) 0 else 0 in
  let rr := fun x => if vis x then gacc_A M (E x) * (Pr x * Rabs (Y x) * Rabs (nth e (fst (fst x)) 0))
                                   + gacc_B M (E x) * (Pr x * ((1 + u) * (eP x + eD x) + ea) * Rabs (nth e (fst (fst x)) 0))
                                   + gacc_c M (E x) Ym ((1 + u) * (eP x + eDm) + ea) W else 0 in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (Y x) * Rabs (nth e (fst (fst x)) 0) else 0)
                      (concat tiles)) in
  running_split_premise Gt rr tiles bp bt ->
  Rabs (dk_kernel_acc M accf sdot pdot vis c cs k v e tiles - scale * rsum (map Gt (concat tiles)))
  <= grad_bound M scale ucs (run_err_split g_acc g_dot g_abs bp bt + rsum (map rr (concat tiles))) S1.
Proof.
  intros accf n g_acc g_dot g_abs sdot pdot vis c cs scale ucs k v e tiles Lx Dx eD delta X eP Dl Am eDm Ym W bp bt
    Hm Hn Hs Hucs Hc Hx E Pr Y Gt rr S1 Hp.
  exact (grad_error_acc_running_pp _ sdot (fun _ => k) (fun x => fst (fst x)) (fun x => fst (snd x))
           (fun x => pdot v (snd (fst x))) (fun x => snd (snd x))
           (fun x => nth e (fst (fst x)) 0) accf n g_acc g_dot g_abs vis c cs scale ucs tiles Lx
           (fun x => dot_R v (snd (fst x))) Dx eD delta X eP Dl Am eDm Ym W bp bt Hm Hn Hs Hucs Hc Hx Hp).
Qed.

(** dQ ([dq_kernel_acc]) of one query row with the error of [dp = pdot dO v_y] bounded per
    key row: [dq_error_acc_running] with [eP y] in place of [gp_rel Pd + gp_abs]. *)
Theorem dq_error_acc_running_pp : forall (accf : R -> list R -> list R -> R) n g_acc g_dot g_abs
    (sdot pdot : list R -> list R -> R) vis c cs scale ucs q dO l2 dl e tiles (Lx D eD : R)
    (delta X eP Am : list R * list R -> R) Dl Ym W bp bt,
  acc_dot_split_model accf n g_acc g_dot g_abs -> Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  Rabs (l2 * ln 2 - Lx) <= Dl -> Rabs (dl - D) <= eD ->
  (forall y, In y (concat tiles) -> vis y = true ->
     Rabs (score2_with A_ sdot c q (fst y) * ln 2 - scale * dot_R q (fst y)) <= delta y
     /\ Rabs (score2_with A_ sdot c q (fst y) - l2) <= Am y
     /\ Rpower 2 ((delta y + Dl) / ln 2 + u * Am y + ea) <= X y
     /\ Rabs (pdot dO (snd y) - dot_R dO (snd y)) <= eP y
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W) ->
  let E := fun y => (1 + ue) * X y in
  let Pr := fun y => exp (scale * dot_R q (fst y) - Lx) in
  let Y := fun y => dot_R dO (snd y) - D in
  let Gt := fun y => if vis y then Pr y * Y y * nth e (fst y) 0 else 0 in
  let rr := fun y => if vis y then gacc_A M (E y) * (Pr y * Rabs (Y y) * Rabs (nth e (fst y) 0))
                                   + gacc_B M (E y) * (Pr y * ((1 + u) * (eP y + eD) + ea) * Rabs (nth e (fst y) 0))
                                   + gacc_c M (E y) Ym ((1 + u) * (eP y + eD) + ea) W else 0 in
  let S1 := rsum (map (fun y => if vis y then Pr y * Rabs (Y y) * Rabs (nth e (fst y) 0) else 0) (concat tiles)) in
  running_split_premise Gt rr tiles bp bt ->
  Rabs (dq_kernel_acc M accf sdot pdot vis c cs q dO l2 dl e tiles - scale * rsum (map Gt (concat tiles)))
  <= grad_bound M scale ucs (run_err_split g_acc g_dot g_abs bp bt + rsum (map rr (concat tiles))) S1.
Proof.
  intros accf n g_acc g_dot g_abs sdot pdot vis c cs scale ucs q dO l2 dl e tiles Lx D eD delta X eP Am Dl
    Ym W bp bt Hm Hn Hs Hucs Hc Hl HdD Hx E Pr Y Gt rr S1 Hp.
  apply (grad_error_acc_running_pp _ sdot (fun _ => q) fst (fun _ => l2) (fun y => pdot dO (snd y)) (fun _ => dl)
           (fun y => nth e (fst y) 0) accf n g_acc g_dot g_abs vis c cs scale ucs tiles (fun _ => Lx)
           (fun y => dot_R dO (snd y)) (fun _ => D) (fun _ => eD) delta X eP (fun _ => Dl) Am eD Ym W bp bt); auto.
  intros y Hin Hvis; destruct (Hx y Hin Hvis) as [H1 [H2 [H3 [H4 [H5 H6]]]]].
  repeat split; auto; lra.
Qed.

End GradPP.
