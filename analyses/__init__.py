"""Analyses of the position embeddings of GPT-2 (and a BERT-style comparison model).

Sources of weights (`sources`, `checkpoint`), one module per topic of study,
the results cache (`cache`, `pipeline`) and the command line (`cli`).
"""
