"""Position against content: where the position embeddings P sit relative to the token embeddings E, and
which of the two subspaces the attention weights and the first MLP read.

Subspaces. P's top-k subspace B_P,k: the top-k right singular vectors of P as published (uncentred),
as in the attention-alignment analysis. E's top-k subspace B_E,k: the top-k right singular vectors of the
row-centred token embeddings E_c = E − m 1ᵀ (the named quantity `E_centred.V`), computed from `W_E` when the
checkpoint has it and read from a saved rank-k PCA otherwise (GPT-2 offline: only E's top directions, exact
to about the first hundred, and no token norms).

Measures (one definition each, in `analyses.toolkit.subspaces`):

* energy fraction a(W; B) = ‖Bᵀ W‖²_F / ‖W‖²_F (a matrix that reads R^D through its rows) or
  ‖W B‖²_F / ‖W‖²_F (one whose rows live in R^D, like P and E, or that writes into it, like W_O); a
  uniformly random k-subspace gives exactly k/D in expectation, with a closed-form standard deviation;
* enrichment a / (k/D) and z = (a − k/D) / sd against random subspaces of the same dimension;
* principal angles between two subspaces; Simon's capture c_j = v_jᵀ Π v_j of each of E's directions v_j
  by P's top subspace;
* for the sum of a token and a position, ρ = ‖t + p‖ / √(‖t‖² + ‖p‖²) (1 when t ⊥ p), and the interference
  ratio κ = D ‖E Pᵀ‖²_F / (‖E‖²_F ‖P‖²_F): the mean squared dot product over all token–position pairs
  relative to what a uniformly random rotation of P gives (κ = 1 in expectation), 0 for orthogonal row spaces.
"""
