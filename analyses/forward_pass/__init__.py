"""Position in the forward pass: the models run on the project's text, and what their hidden states and attention
do with position.

Input. The project's own text (`analyses.toolkit.text`), tokenised with each model's tokenizer; prompts are cut
from its start at word boundaries (`prompt_words` words: about 15, 150 and 500 GPT-2 tokens). MiniLM's prompts
carry its [CLS] … [SEP]; GPT-2's carry no special token (as transformers' generate uses it). The forward passes
are `analyses.toolkit.forward` (numpy, float64, checked against transformers in the tests).

Hidden states. State 0 is the residual stream after the embeddings (GPT-2: e_t + p_n; BERT: after the embedding
LayerNorm), state ℓ + 1 the stream after layer ℓ. The statistics of positions use the content rows R: every
position except the first (GPT-2's first token, an attention sink, and BERT's [CLS]) and BERT's final [SEP].

Analyses (definitions in each function's docstring):

1. `forward_prompts`: the prompts and their exact token ids.
2. `signal_subspaces`: per state, the singular values of the centred hidden states against the
   Marchenko–Pastur noise edge, the signal subspace, effective rank, principal angles between consecutive
   states, the union of all states' subspaces, and an MDS map of the states.
3. `position_share`: the share of hidden-state variance explained by position and by token identity, in the
   text's order and with the same tokens shuffled.
4. `text_attention`: every head's pattern on text against its pattern on the position rows alone.
5. `position_ablation`: P's top-3 principal subspace removed from the position embeddings, against random
   3-dimensional changes of the same size: attention, hidden states, sentence embeddings.
6. `logit_lens`: the next-token distribution read from every state, and greedy generation (GPT-2 with W_E).
"""
