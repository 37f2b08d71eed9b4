"""Report writers: one module per output format, for `check` and `fix` alike.

text (rich), json_report (the contract's shape), github (Actions annotations), sarif
(2.1.0), diff (fix --diff). They read Report / FixResult data (hfdoctor.findings) and
never import check or fix.
"""
