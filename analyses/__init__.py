"""Analyses of the position embeddings of GPT-2 (and a BERT-style comparison model).

Two subpackages hold the machinery: `analyses.engine` (sources of weights, the registry, the
cache, the pipeline and the command line) and `analyses.toolkit` (linear algebra, statistics
and the figure style that several topics share). Every other module here is a topic of
study: it registers its analyses and is found by where it lives.
"""
