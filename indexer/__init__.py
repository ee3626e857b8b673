"""The offline indexer: video files -> an index directory (docs/architecture.md, "Building an index").

The library entry points are in :mod:`indexer.api` (re-exported here); the `indexer` command
(:mod:`qaslr.commands.indexer`) is a thin layer over them.
"""

from indexer.api import (
    BuildJob,
    BuildOptions,
    BuildReport,
    Indexer,
    OptionsError,
    Progress,
    RemoveReport,
    add_to_index,
    assemble_manifest,
    build_index,
    compact_index,
    index_stats,
    prepare_add,
    prepare_build,
    publish_index,
    remove_from_index,
    verify_index,
)

__all__ = [
    "BuildJob",
    "BuildOptions",
    "BuildReport",
    "Indexer",
    "OptionsError",
    "Progress",
    "RemoveReport",
    "add_to_index",
    "assemble_manifest",
    "build_index",
    "compact_index",
    "index_stats",
    "prepare_add",
    "prepare_build",
    "publish_index",
    "remove_from_index",
    "verify_index",
]
