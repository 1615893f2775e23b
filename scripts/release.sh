#!/usr/bin/env bash
# Tag a release: an annotated tag v<version> on the current commit, the version read from pyproject.toml.
# pre-commit users pin `rev: v<version>` once the tag is pushed (docs/quickstart-pipeline.md). Pushing is left to
# you, so nothing leaves the machine by accident:
#
#   scripts/release.sh            # checks, then: git tag -a v0.1.0 -m "bnconvention 0.1.0"
#   git push origin v0.1.0
#
# Refuses (exit 1) when the working tree has uncommitted changes, when pyproject.toml and bnconvention/_version.py
# disagree on the version, or when the tag already exists.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)"
code_version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' bnconvention/_version.py)"
if [ -z "$version" ] || [ "$version" != "$code_version" ]; then
    echo "release: pyproject.toml says version '$version' but bnconvention/_version.py says '$code_version'" >&2
    exit 1
fi
tag="v$version"
if [ -n "$(git status --porcelain)" ]; then
    echo "release: the working tree has uncommitted changes; commit or stash them before tagging $tag" >&2
    exit 1
fi
if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
    echo "release: tag $tag already exists (at $(git rev-parse "$tag^{commit}")); bump the version first" >&2
    exit 1
fi
git tag -a "$tag" -m "bnconvention $version"
echo "tagged $tag at $(git rev-parse HEAD); publish it with: git push origin $tag"
