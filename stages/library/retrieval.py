"""Retrieval stages: exact vector search (`retrieval.vector`), a read-only parameterised SQL
statement (`retrieval.sql`), and the fusion of several retrievers' results at a join
(`retrieval.fuse`). Each lives in its own module (corpus, vector_retrieval, sql_retrieval,
fuse); this module keeps the names the `collobench.stages` entry points in pyproject.toml and
earlier callers import from here.
"""

from __future__ import annotations

from stages.library.corpus import DOCUMENTS_FIELD as DOCUMENTS_FIELD
from stages.library.corpus import DOCUMENTS_FILE as DOCUMENTS_FILE
from stages.library.corpus import EMBEDDING_FIELD as EMBEDDING_FIELD
from stages.library.corpus import CorpusConfig as CorpusConfig
from stages.library.corpus import corpus_file as corpus_file
from stages.library.fuse import FuseConfig as FuseConfig
from stages.library.fuse import FuseStage as FuseStage
from stages.library.sql_retrieval import SqlConfig as SqlConfig
from stages.library.sql_retrieval import SqlRetrievalStage as SqlRetrievalStage
from stages.library.sql_retrieval import SqlRowLimitError as SqlRowLimitError
from stages.library.sql_retrieval import SqlTimeoutError as SqlTimeoutError
from stages.library.sql_retrieval import parse_statement as parse_statement
from stages.library.vector_retrieval import VectorConfig as VectorConfig
from stages.library.vector_retrieval import VectorRetrievalStage as VectorRetrievalStage
