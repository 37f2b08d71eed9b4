"""hfdoctor: lint and repair Hugging Face model repositories."""

# The one place the version is written: pyproject.toml reads it from here ([tool.hatch.version]),
# so the package's metadata, `hfdoctor --version`, the JSON reports and SARIF agree. Not read
# back through importlib.metadata: that costs a tenth of a second at every start (the hook's),
# and an older installed copy would answer with its own version.
__version__ = "0.5.0"
