"""Where a repository's bytes come from: a directory, a Hub repo at a revision, a git commit.

ModelRepo reads every file through one Source, so no rule cares where bytes come from:

- base: Entry (what a path is), the read limits per kind of file, the errors, and a
  seekable file over ranged reads (zip directories, GGUF headers);
- local: a directory on disk, read as regular files only, never blocking, never through
  a symlink that leaves the repository;
- hub: a Hub repo at a revision through huggingface_hub: one listing, then only the
  files rules read, headers by HTTP range, all bounded in bytes and time;
- git: a commit of a git repository (git ls-tree / cat-file), LFS objects from .git/lfs;
- targets: TARGET text → Source (a path, a .gguf file, ORG/NAME[@REV], --revision, --git-rev);
- revisions: the one check of a Hub revision (commit id, branch or tag name, refs/pr/N).

These modules import nothing else of hfdoctor but each other.
"""
