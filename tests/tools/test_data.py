"""ojas_ref.tools.data: corpus, byte-level BPE, hash-keyed token cache, resumable loader, id guard."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from ojas_ref.tools import data

MAX_BYTES = 150_000
VOCAB = 400


@pytest.fixture(scope="module")
def corpus() -> data.Corpus:
    return data.read_corpus(max_bytes=MAX_BYTES)


@pytest.fixture(scope="module")
def prepared(corpus: data.Corpus, tmp_path_factory: pytest.TempPathFactory) -> data.PreparedData:
    return data.prepare(corpus, VOCAB, tmp_path_factory.mktemp("cache"))


def test_stdlib_corpus_sorted_and_cut(corpus: data.Corpus) -> None:
    assert corpus.num_bytes == MAX_BYTES
    root = data.stdlib_directory()
    first = sorted(
        (p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts),
        key=lambda p: p.relative_to(root).as_posix(),
    )[0]
    assert corpus.documents[0] == first.read_bytes()[:MAX_BYTES]
    assert data.read_corpus(max_bytes=MAX_BYTES).sha256 == corpus.sha256
    assert data.read_corpus(max_bytes=MAX_BYTES - 1).sha256 != corpus.sha256


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_corpus_bad_max_bytes(bad) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        data.read_corpus(max_bytes=bad)


def test_corpus_no_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="glob"):
        data.read_corpus(tmp_path, "*.py")


def test_corpus_unreadable_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of the corpus that cannot be read (permissions; root reads anything, so stubbed) is a
    ValueError naming it, not an OSError traceback out of ``ojas train``."""
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    read = Path.read_bytes

    def denied(self: Path) -> bytes:
        if self.name == "b.py":
            raise PermissionError(13, "Permission denied", str(self))
        return read(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(
        ValueError,
        match=rf"^directory {re.escape(repr(str(tmp_path)))}: cannot read "
        rf"{re.escape(str(tmp_path / 'b.py'))} \(Permission denied\)$",
    ):
        data.read_corpus(tmp_path, "*.py")


def test_tokenizer_round_trip_and_eos(prepared: data.PreparedData, corpus: data.Corpus) -> None:
    tokenizer, tokens = prepared.tokenizer, np.asarray(prepared.tokens)
    eos = tokenizer.token_to_id(data.EOS_TOKEN)
    assert prepared.vocab_size == VOCAB and 0 <= eos < VOCAB
    ends = np.flatnonzero(tokens == eos)
    assert len(ends) == len(corpus.documents)  # one end-of-text token after each document
    text = corpus.texts()[0]
    assert tokenizer.decode(tokens[: ends[0]].tolist()) == text  # byte-level BPE: lossless
    assert len(tokens) < 0.75 * corpus.num_bytes  # merges learned: well under a token per byte


def test_vocab_size_counts_added_tokens(prepared: data.PreparedData) -> None:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer.from_str(prepared.tokenizer.to_str())
    base = tokenizer.get_vocab_size(with_added_tokens=False)
    tokenizer.add_special_tokens(["<|user|>", "<|assistant|>"])
    assert data.vocab_size(tokenizer) == base + 2
    assert data.vocab_size(PreTrainedTokenizerFast(tokenizer_object=tokenizer)) == base + 2
    ids = tokenizer.encode("<|assistant|> hi").ids
    assert max(ids) == base + 1
    data.check_token_ids(np.asarray(ids), data.vocab_size(tokenizer))  # the embedding size that fits
    with pytest.raises(ValueError, match=f"token id {base + 1} .* vocabulary of size {base}"):
        data.check_token_ids(np.asarray(ids), base)  # the size without the added tokens does not


def test_cache_keyed_by_contents_not_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, cache = tmp_path / "src", tmp_path / "cache"
    source.mkdir()
    (source / "a.py").write_text("def alpha(x):\n    return x + 1\n" * 200)
    first = data.prepare(data.read_corpus(source), 300, cache)
    (source / "a.py").write_text("class Beta:\n    pass\n" * 200)  # same file name, other contents
    second = data.prepare(data.read_corpus(source), 300, cache)
    assert second.tokens_key != first.tokens_key and second.tokenizer_key != first.tokenizer_key
    fresh = second.tokenizer.encode("class Beta:\n    pass\n" * 200).ids
    assert np.asarray(second.tokens)[:-1].tolist() == fresh  # not the stale ids of the old file
    monkeypatch.setattr(data, "train_tokenizer", lambda *a, **k: pytest.fail("cache miss"))
    again = data.prepare(data.read_corpus(source), 300, cache)  # same contents: served from the cache
    assert again.tokens_key == second.tokens_key
    assert np.array_equal(np.asarray(again.tokens), np.asarray(second.tokens))
    with pytest.raises(pytest.fail.Exception, match="cache miss"):
        data.prepare(data.read_corpus(source), 301, cache)  # another vocabulary: another key


def _batches(loader: data.WindowLoader, n: int) -> list[torch.Tensor]:
    return [next(loader) for _ in range(n)]


def test_loader_windows_shuffled_each_once() -> None:
    seq, batch, windows = 16, 4, 50
    tokens = np.arange(windows * seq + 1, dtype=np.uint16)  # window i starts with token i * seq
    loader = data.WindowLoader(tokens, batch, seq, seed=3, model_vocab_size=len(tokens))
    assert loader.batches_per_epoch == windows // batch
    epoch = torch.cat(_batches(loader, loader.batches_per_epoch))
    assert epoch.shape == (windows // batch * batch, seq + 1) and epoch.dtype == torch.int64
    starts = (epoch[:, 0] // seq).tolist()
    assert torch.equal(epoch, epoch[:, :1] + torch.arange(seq + 1))  # whole windows of seq + 1 tokens
    assert len(set(starts)) == len(starts) and starts != sorted(starts)  # each once (2 dropped), shuffled
    again = data.WindowLoader(tokens, batch, seq, seed=3, model_vocab_size=len(tokens))
    assert torch.equal(torch.cat(_batches(again, loader.batches_per_epoch)), epoch)
    other = data.WindowLoader(tokens, batch, seq, seed=4, model_vocab_size=len(tokens))
    assert not torch.equal(torch.cat(_batches(other, loader.batches_per_epoch)), epoch)
    second_epoch = torch.cat(_batches(loader, loader.batches_per_epoch))
    assert loader.epoch == 1 and not torch.equal(second_epoch, epoch)


def test_loader_resumes_across_epochs(prepared: data.PreparedData) -> None:
    make = lambda: data.WindowLoader(prepared.tokens, 8, 32, seed=0, model_vocab_size=VOCAB)  # noqa: E731
    reference = make()
    n = reference.batches_per_epoch
    expected = _batches(reference, 2 * n + 3)
    for stop in (0, 1, n - 1, n, n + 2):
        first = make()
        head = _batches(first, stop)
        resumed = make()
        resumed.load_state_dict(first.state_dict())
        tail = _batches(resumed, 2 * n + 3 - stop)
        assert all(torch.equal(a, b) for a, b in zip(head + tail, expected, strict=True))


def test_loader_state_mismatch(prepared: data.PreparedData) -> None:
    state = data.WindowLoader(prepared.tokens, 8, 32, seed=0, model_vocab_size=VOCAB).state_dict()
    with pytest.raises(ValueError, match="seed=0"):
        data.WindowLoader(prepared.tokens, 8, 32, seed=1, model_vocab_size=VOCAB).load_state_dict(state)
    with pytest.raises(ValueError, match="batch_size=8"):
        data.WindowLoader(prepared.tokens, 4, 32, seed=0, model_vocab_size=VOCAB).load_state_dict(state)


def test_bad_token_id_is_named(prepared: data.PreparedData) -> None:
    tokens = np.array(prepared.tokens, dtype=np.int64)
    tokens[1234] = VOCAB + 7
    with pytest.raises(ValueError, match=rf"token id {VOCAB + 7} \(at position 1234.*vocabulary of size {VOCAB}"):
        data.WindowLoader(tokens, 4, 16, seed=0, model_vocab_size=VOCAB)
    tokens[1234] = -1
    with pytest.raises(ValueError, match=r"token id -1 \(at position 1234"):
        data.check_token_ids(torch.from_numpy(tokens), VOCAB)
    data.WindowLoader(np.asarray(prepared.tokens), 4, 16, seed=0, model_vocab_size=VOCAB)  # the real ids fit


def test_loader_too_little_data() -> None:
    with pytest.raises(ValueError, match="batch_size 4"):
        data.WindowLoader(np.zeros(40, dtype=np.uint16), 4, 16, seed=0, model_vocab_size=10)
    with pytest.raises(ValueError, match="seq_len"):
        data.WindowLoader(np.zeros(40, dtype=np.uint16), 4, 0, seed=0, model_vocab_size=10)
