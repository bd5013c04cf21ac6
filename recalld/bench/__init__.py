"""The benchmarks: `recalld bench [NAMES...]` (or `benchmarks/run` in a source checkout) runs
them and writes one report.

recalld.bench.run holds the explicit list of benchmarks and the report writer; each benchmark is
one module here (locomo, search, budget, ablations, core, load, crystals, crystal_budget, rerank,
judge, daemon, proposer) that calls the library itself, never a copy of it. common holds what
they share (percentiles, interleaved timing, where the shared data folder lies), synth the synthetic
coding-agent memories, planted the planted-secrets fixture, hooktrace the timed hook process
that load --trace runs. Shipped in the package, so an
installed wheel benchmarks itself; data (LoCoMo, recorded transcripts) is read from the shared data folder beside the checkout or
--data and never shipped.
"""
