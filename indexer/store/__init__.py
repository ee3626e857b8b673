"""The index directory: its format, FAISS helpers, the metadata store, the writer, the reader and
the filter language (docs/architecture.md, "The index directory").

    format       file names, Manifest, VideoRecord, FrameBank, Entry, errors, read_manifest
    faiss_index  factory choice, building/training, ids, (de)serialising
    db           meta.sqlite: every SQL statement (rows read by column name)
    writer       IndexWriter: atomic batch commits, FAISS checkpoints, crash repair
    reader       IndexReader: the read-only, thread-safe view the service uses
    filters      the metadata filter language
"""

from indexer.store.db import MetadataStore, connect_readonly
from indexer.store.faiss_index import (
    EXACT_MAX_VECTORS,
    default_factory,
    faiss_ids,
    make_faiss_index,
    normalize_factory,
)
from indexer.store.filters import parse_filter
from indexer.store.format import (
    BANK_DIR,
    BUILTIN_FILTER_FIELDS,
    FAISS_FILE,
    FORMAT_VERSION,
    MANIFEST,
    METADATA,
    Entry,
    FrameBank,
    IndexFormatError,
    IndexMismatchError,
    Manifest,
    VideoRecord,
    read_manifest,
)
from indexer.store.reader import IndexReader
from indexer.store.writer import IndexWriter

__all__ = [
    "BANK_DIR",
    "BUILTIN_FILTER_FIELDS",
    "EXACT_MAX_VECTORS",
    "FAISS_FILE",
    "FORMAT_VERSION",
    "MANIFEST",
    "METADATA",
    "Entry",
    "FrameBank",
    "IndexFormatError",
    "IndexMismatchError",
    "IndexReader",
    "IndexWriter",
    "Manifest",
    "MetadataStore",
    "VideoRecord",
    "connect_readonly",
    "default_factory",
    "faiss_ids",
    "make_faiss_index",
    "normalize_factory",
    "parse_filter",
    "read_manifest",
]
