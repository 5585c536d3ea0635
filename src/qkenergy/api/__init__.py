"""The notebook API: one object to hold per model, head, null law and analysis.

``qk.open(model) -> Model``, ``Model.head(layer, head) -> Head``, ``Head.null() -> Law``,
``qk.analyze(model) -> Analysis``, ``qk.read(path) -> Analysis``; ``qk.verify() -> Verification``,
``qk.lobes() -> LobeDeparture``, ``qk.layouts() -> Layouts``, ``qk.coverage() -> Coverage``;
``qk.survey(manifest, out) -> Survey``, ``qk.open_survey(out) -> Survey``, ``qk.write_report(sources, output)``; the package root
(``import qkenergy as qk``) exports them lazily.
"""
