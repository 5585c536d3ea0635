import tempfile
from pathlib import Path

import numpy as np
from distributed import LocalCluster

import qkenergy as qk
from qkenergy.analysis.analyze import analyze_model
from qkenergy.math.baselines import gaussian_square_law, qk_product_expectations
from qkenergy.math.entry_laws import entry_law
from qkenergy.math.montecarlo import energy_expectations
from qkenergy.math.nulls import null_law
from qkenergy.math.statistics import head_statistics

# Per-head statistics straight from weights (Gram route, batched over heads).
rng = np.random.default_rng(0)
w_query = rng.standard_normal((12, 32, 384)).astype(np.float32)
w_key = rng.standard_normal((12, 32, 384)).astype(np.float32)
stats = head_statistics(w_query, w_key)
print(stats.symmetric_energy[:3], stats.head_type[:3])

# Closed forms (Corollary 2) and an exact law (Corollary 1, Gaussian square L).
print(qk_product_expectations(n=32, N=384, sigma2_K=0.02, sigma2_Q=0.05).symmetric_ratio)
print(gaussian_square_law(2).mean(), gaussian_square_law(2).ppf([0.05, 0.95]))

# Ratio of expectations against expectation of the ratio, skewed entries (docs/mathematics.md, section 5).
est = energy_expectations("square", entry_law("exponential"), N=2, samples=200_000, seed=1)
print(est.ratio_of_expectations, est.expectation_of_ratio)

# The exact null law of a Gaussian head of shape (n, N) and where a value falls.
law = null_law(32, 384, samples=2000, seed=0)
print(law.mean("symmetric_energy"), law.sd("symmetric_energy"), law.p_two_sided("symmetric_energy", 0.51))

# The whole job on the embedded MiniLM checkpoint, as a DataFrame.
result = analyze_model(None, layers=[2], samples=500)
print(result.heads[["layer", "head", "symmetric_energy", "symmetric_energy_z", "head_type"]].head(4))

# The notebook API: one object per model, head, null law and analysis.
model = qk.open()  # None: the embedded all-MiniLM-L6-v2; or a path, hub id, transformers model ...
head = model.head(2, 3)  # weights, Gram matrix, spectra; the table's statistics by column name
print(head, head.symmetric_energy, head.head_type, head.singular_values[:2])
s_law = head.null(samples=500)  # the head's null law of s, a frozen distribution
# pvalue: the table's p (the empirical p, or the Beta tail p_tail beyond its floor 2/(K+1))
print(s_law.mean(), s_law.ppf([0.05, 0.95]), s_law.pvalue(head.symmetric_energy, tail="empirical"))
print(s_law.p_tail(head.symmetric_energy) == s_law.pvalue(head.symmetric_energy) < 1e-300)
analysis = model.analyze(layers=[2], samples=500)  # the same run as result above, as one object
print(analysis.top(1)[["layer", "head", "symmetric_energy", "head_type"]])
fig = analysis.figure("symmetric_profiles")  # a matplotlib Figure; analysis.write("x.parquet"), qk.read

# The other commands' results, one frozen object each: .table (DataFrame), .records(), .summary().
checks = qk.verify(samples=200)  # every claim of the mathematics checked numerically (`qkenergy verify`)
curve = qk.lobes("pareto:1.5", ns=[10, 1000], repeats=5)  # Lemma 6's D_n along n (`qkenergy lobes`)
random_head = qk.baseline(8, 32, samples=500)  # a random head's laws, (N+1)/(2N) (`qkenergy baseline`)
print(checks.passed, curve.finite_second_moment, "llama" in qk.layouts().model_types)
print(random_head.ratio_of_expectations, random_head.table.loc["pairing", "mean"].round(2))
print(qk.coverage(["llama", "mamba", "no_such_type"]).counts)  # `qkenergy layouts --coverage`
# Many models in one restartable run (docs/survey.md) as one object: here the MiniLM's first layer, on
# a Dask cluster of threads in this process (by default qk.survey starts worker processes of its own).
with tempfile.TemporaryDirectory() as work, LocalCluster(n_workers=1, processes=False) as cluster:
    manifest = Path(work) / "models.toml"
    manifest.write_text('[[model]]\nsource = "embedded"\nname = "minilm"\nlayers = "0"\n')
    spec = qk.NullSpec(samples=500)  # the null laws' settings, one object (qk.TypeRule: the head types')
    survey = qk.survey(manifest, Path(work) / "out", null=spec, scheduler=cluster.scheduler_address)
    print(survey.null == spec, len(survey.heads), survey.figures[:2])  # survey.summary(), survey.layers
    survey_figure = survey.figure("symmetric_energy_by_depth")  # plotly; survey.report("report.html")
