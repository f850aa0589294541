"""The engine: where weights come from (`sources`, `checkpoint`), what an analysis returns
(`results`), which analyses exist (`registry`), what a result depends on (`fingerprints`),
where results are kept (`cache`) and cited from (`index`), how they are brought up to date
(`pipeline`), and the command line (`cli`, `bench`)."""
