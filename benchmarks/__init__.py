"""Measurements of dphr_haystack (not tests), one driver per benchmark: ``python -m benchmarks.<group>.<name>``.

Groups: ``speed`` (throughput, latency, start-up), ``index`` (index structures: size, latency, recall),
``memory`` (peak and resident memory, sizes on disk), ``quality`` (accuracy on SQuAD-open-small and the settings
chosen on validation questions), ``haystack`` (the Haystack 1.x and 2.x surfaces), ``training`` (training speed
and the training recipes' measurements). Drivers share library modules and never import each other: ``common``
(SQuAD data, question splits, the SQuAD-open-small store, machine facts, result files, figures), ``rankings``
(pipeline rankings and their fusion), ``significance`` (paired and unpaired differences) and ``checkpoints``
(scoring a checkpoint on validation corpora). ``report`` renders benchmarks/README.md and train/RECORDS.md.
"""
