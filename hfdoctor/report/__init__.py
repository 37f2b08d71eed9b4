"""Report writers: one module per output format, for `check` and `fix` alike.

text (rich), json_report (the contract's shape), github (Actions annotations), sarif
(2.1.0), markdown (the CI job summary), diff (fix --diff); inert makes text from outside
(a repository, the Hub, an endpoint) inert data in each of them. They read Report /
FixResult data (hfdoctor.findings) and never import check or fix.
"""
