"""Training data: a text corpus every machine has, a byte-level BPE, a token cache and a
deterministic, resumable loader.

* :func:`read_corpus`: the files matching a glob under a directory, sorted by relative
  path, up to ``max_bytes`` (default: the ``.py`` files of the Python standard library).
* :func:`train_tokenizer`: a byte-level BPE trained by the ``tokenizers`` library;
  :func:`vocab_size` counts the added (special) tokens too.
* :func:`prepare`: tokenizer and token ids from a cache keyed by the sha256 of the corpus
  bytes and of the tokenizer's configuration / serialisation (never by a file name).
* :class:`WindowLoader`: batches of ``[batch, seq + 1]`` windows in an order shuffled per
  epoch from ``(seed, epoch)``; its position ``(epoch, index)`` is its state.
* :func:`check_token_ids`: a ValueError naming the id and the vocabulary size for any id
  that the model's embedding cannot index, before anything reaches a kernel.
"""

from __future__ import annotations

import hashlib
import io
import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import torch

from ojas_ref.tools.train_state import atomic_write

__all__ = [
    "EOS_TOKEN",
    "Corpus",
    "PreparedData",
    "WindowLoader",
    "check_token_ids",
    "prepare",
    "read_corpus",
    "stdlib_directory",
    "train_tokenizer",
    "vocab_size",
]

EOS_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = (EOS_TOKEN,)


def stdlib_directory() -> Path:
    """The directory of the Python standard library's own source files."""
    return Path(sysconfig.get_paths()["stdlib"])


@dataclass(frozen=True)
class Corpus:
    """Documents (one per file, the last one possibly cut at ``max_bytes``) and their sha256."""

    documents: tuple[bytes, ...]
    sha256: str

    @property
    def num_bytes(self) -> int:
        return sum(len(d) for d in self.documents)

    def texts(self) -> list[str]:
        """The documents as text (invalid UTF-8, e.g. a file cut mid-character, replaced)."""
        return [d.decode("utf-8", errors="replace") for d in self.documents]


def read_corpus(directory: Optional[Path | str] = None, glob: str = "*.py", max_bytes: int = 4_000_000) -> Corpus:
    """The files matching ``glob`` under ``directory`` (recursively; default the standard
    library without ``site-packages``), sorted by relative path, concatenated up to ``max_bytes``."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes must be an int >= 1, got {max_bytes!r}")
    root = stdlib_directory() if directory is None else Path(directory)
    if not root.is_dir():
        raise ValueError(f"directory {str(root)!r} is not a directory")
    files = sorted(
        (p for p in root.rglob(glob) if p.is_file() and "site-packages" not in p.relative_to(root).parts),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    documents, total, digest = [], 0, hashlib.sha256()
    for path in files:
        try:
            data = path.read_bytes()[: max_bytes - total]
        except OSError as err:
            raise ValueError(f"directory {str(root)!r}: cannot read {path} ({err.strerror or err})") from None
        if data:
            documents.append(data)
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
            total += len(data)
        if total == max_bytes:
            break
    if not documents:
        raise ValueError(f"no non-empty file matches glob {glob!r} under directory {str(root)!r}")
    return Corpus(tuple(documents), digest.hexdigest())


def train_tokenizer(texts: list[str], vocab: int, special_tokens: tuple[str, ...] = SPECIAL_TOKENS) -> Any:
    """A byte-level BPE (``tokenizers``: ByteLevel pre-tokenizer and decoder, all 256 bytes in
    the initial alphabet) of at most ``vocab`` tokens, the special tokens included."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab < 256 + len(special_tokens):
        raise ValueError(
            f"vocab must be >= {256 + len(special_tokens)} (256 bytes and the special tokens), got {vocab}"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(special_tokens),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def vocab_size(tokenizer: Any) -> int:
    """The number of ids ``tokenizer`` can produce, added tokens included (a ``tokenizers.Tokenizer``
    or a ``transformers`` tokenizer): the size the model's embedding needs."""
    if hasattr(tokenizer, "get_vocab_size"):
        return tokenizer.get_vocab_size(with_added_tokens=True)
    return len(tokenizer)


def check_token_ids(tokens: np.ndarray | torch.Tensor, model_vocab_size: int) -> None:
    """Raise ValueError naming the first id outside ``[0, model_vocab_size)``, its position and the size."""
    array = tokens.numpy() if isinstance(tokens, torch.Tensor) else np.asarray(tokens)
    bad = np.flatnonzero((array >= model_vocab_size) | (array < 0))
    if bad.size:
        position = int(bad[0])
        raise ValueError(
            f"token id {int(array[position])} (at position {position}, {bad.size} such ids in all) is outside the "
            f"model's vocabulary of size {model_vocab_size}: the embedding would be indexed out of range. Build the "
            "model with vocab_size(tokenizer), which counts the added tokens"
        )


@dataclass
class PreparedData:
    """A tokenizer and the corpus's token ids (memory-mapped from the cache), with their keys."""

    tokenizer: Any
    tokens: np.ndarray
    corpus: Corpus
    tokenizer_key: str
    tokens_key: str

    @property
    def vocab_size(self) -> int:
        return vocab_size(self.tokenizer)


def _sha256(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


#: end-of-text tokens of common tokenizers, tried in this order on a given tokenizer
EOS_CANDIDATES = (EOS_TOKEN, "</s>", "<|end_of_text|>", "<eos>")


def _eos_id(tokenizer: Any) -> int:
    for token in EOS_CANDIDATES:
        found = tokenizer.token_to_id(token)
        if found is not None:
            return found
    raise ValueError(
        f"the tokenizer has none of the end-of-text tokens {EOS_CANDIDATES}: documents cannot be separated"
    )


def prepare(corpus: Corpus, vocab: int, cache_dir: Path | str, tokenizer: Any = None) -> PreparedData:
    """Tokenizer and token ids of ``corpus`` (the documents, each followed by the end-of-text
    token), from ``cache_dir`` or built and cached there; ``tokenizer`` (a
    ``tokenizers.Tokenizer``, e.g. a pretrained model's) instead of training one.

    A trained tokenizer is cached under the sha256 of the corpus and of the training settings
    (vocabulary, special tokens, ``tokenizers`` version); the ids under the sha256 of the
    corpus and of the tokenizer's own serialisation. So a changed corpus or tokenizer gives a
    new entry and a stale one is never reused."""
    import tokenizers

    cache = Path(cache_dir)
    (cache / "tokenizers").mkdir(parents=True, exist_ok=True)
    (cache / "tokens").mkdir(parents=True, exist_ok=True)
    if tokenizer is not None:
        tokenizer_key = hashlib.sha256(tokenizer.to_str().encode()).hexdigest()
    else:
        settings = json.dumps(
            {
                "model": "bpe",
                "pre_tokenizer": "byte_level",
                "vocab": vocab,
                "special_tokens": list(SPECIAL_TOKENS),
                "tokenizers": tokenizers.__version__,
            }
        )
        tokenizer_key = _sha256(corpus.sha256, settings)
        tokenizer_file = cache / "tokenizers" / f"{tokenizer_key}.json"
        if tokenizer_file.exists():
            tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_file))
        else:
            tokenizer = train_tokenizer(corpus.texts(), vocab)
            atomic_write(tokenizer_file, [tokenizer.to_str().encode()])
    tokens_key = _sha256(corpus.sha256, hashlib.sha256(tokenizer.to_str().encode()).hexdigest())
    tokens_file = cache / "tokens" / f"{tokens_key}.npy"
    if not tokens_file.exists():
        eos = _eos_id(tokenizer)
        ids = [np.append(np.asarray(e.ids, dtype=np.int64), eos) for e in tokenizer.encode_batch(corpus.texts())]
        dtype = np.uint16 if vocab_size(tokenizer) <= 2**16 else np.uint32
        buffer = io.BytesIO()
        np.save(buffer, np.concatenate(ids).astype(dtype))
        atomic_write(tokens_file, [buffer.getbuffer()])
    return PreparedData(tokenizer, np.load(tokens_file, mmap_mode="r"), corpus, tokenizer_key, tokens_key)


class WindowLoader:
    """Endless batches ``[batch_size, seq_len + 1]`` (int64) of the token windows
    ``tokens[i * seq_len : i * seq_len + seq_len + 1]``, every window once per epoch, in the
    order ``numpy.random.default_rng([seed, epoch]).permutation``; an epoch's last partial
    batch is dropped. The order is a function of ``(seed, epoch)``, so the position
    ``(epoch, index)`` (:meth:`state_dict`) is all a resumed run needs."""

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int, model_vocab_size: int) -> None:
        for name, value in (("batch_size", batch_size), ("seq_len", seq_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        check_token_ids(tokens, model_vocab_size)
        self.tokens, self.batch_size, self.seq_len, self.seed = tokens, batch_size, seq_len, seed
        self.windows = (len(tokens) - 1) // seq_len
        self.batches_per_epoch = self.windows // batch_size
        if self.batches_per_epoch == 0:
            raise ValueError(
                f"the corpus's {len(tokens)} tokens make {self.windows} window(s) of seq_len "
                f"{seq_len} + 1, "
                f"fewer than batch_size {batch_size}: use more data (max_bytes) or smaller batches"
            )
        self.epoch, self.index = 0, 0
        self._order_epoch, self._order = -1, np.empty(0, dtype=np.int64)

    def _permutation(self) -> np.ndarray:
        if self._order_epoch != self.epoch:
            self._order = np.random.default_rng([self.seed, self.epoch]).permutation(self.windows)
            self._order_epoch = self.epoch
        return self._order

    def __iter__(self) -> Iterator[torch.Tensor]:
        return self

    def __next__(self) -> torch.Tensor:
        if self.index == self.batches_per_epoch:
            self.epoch, self.index = self.epoch + 1, 0
        picked = self._permutation()[self.index * self.batch_size : (self.index + 1) * self.batch_size]
        self.index += 1
        span = self.seq_len + 1
        rows = [np.asarray(self.tokens[w * self.seq_len : w * self.seq_len + span], dtype=np.int64) for w in picked]
        return torch.from_numpy(np.stack(rows))

    def state_dict(self) -> dict[str, int]:
        """The position (and the settings it is relative to)."""
        return {
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "windows": self.windows,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a saved position; the settings must be those it was saved with."""
        for name in ("seed", "batch_size", "seq_len", "windows"):
            if state[name] != getattr(self, name):
                raise ValueError(
                    f"loader state is for {name}={state[name]}, this loader has {name}={getattr(self, name)}"
                )
        if not (0 <= state["index"] <= self.batches_per_epoch and state["epoch"] >= 0):
            raise ValueError(
                f"loader state has epoch {state['epoch']}, index {state['index']}, outside "
                f"0..{self.batches_per_epoch} batches per epoch"
            )
        self.epoch, self.index = state["epoch"], state["index"]
