"""Report writers: one module per output format, all reading the same Report."""
