"""What hfdoctor knows about model families: the registry, and where upstream files are found."""
