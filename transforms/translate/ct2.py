"""`ctranslate2` backend: MADLAD-400 or NLLB-200 checkpoints converted with ct2-transformers-converter.

CTranslate2 takes token *strings*, so the tokenizer decides what the model sees:

* MADLAD-400 (T5): the target tag goes into the source *text*, `"<2hi> " + text`, and the whole string is
  tokenised (SentencePiece splits it into "▁", "<2hi>", ...: the same pieces the model was trained on;
  adding the bare tag to the token list instead drops the boundary piece). No target prefix.
* NLLB-200 (M2M100): source = [source language code] + pieces + ["</s>"], and the target language code
  (`hin_Deva`) is the target prefix; it comes back as the first output token and is removed.

Batches arrive sorted by length (the base class); each is one `translate_batch` call. Sources longer
than `max_input_tokens` are cut (end token kept) and counted as truncated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transforms.core.deps import require
from transforms.translate.base import TranslationEngine
from transforms.translate.config import CT2Config
from transforms.translate.languages import LanguageError, madlad_tag, nllb_code

SPM_FILES = ("spiece.model", "sentencepiece.model", "sentencepiece.bpe.model")
EOS = "</s>"


class SentencePieceTokenizer:
    def __init__(self, path: str):
        spm = require("sentencepiece", "mt", "the ctranslate2 translation backend")
        self.sp = spm.SentencePieceProcessor(model_file=path)

    def pieces(self, text: str) -> list[str]:
        return list(self.sp.encode(text, out_type=str))

    def encode(self, text: str, src_code: str | None) -> list[str]:
        return ([src_code] if src_code else []) + self.pieces(text) + [EOS]

    def decode(self, tokens: list[str]) -> str:
        keep = []
        for t in tokens:
            i = self.sp.piece_to_id(t)
            if i == self.sp.unk_id() and t != self.sp.id_to_piece(i):
                continue  # not a piece of this vocabulary: a language code such as hin_Deva
            if not self.sp.is_control(i):  # </s>, <pad>
                keep.append(t)
        text: str = self.sp.decode(keep)
        return text

    def ids(self, tokens: list[str]) -> list[int]:
        return [self.sp.piece_to_id(t) for t in tokens]

    def knows(self, token: str) -> bool:
        return bool(self.sp.piece_to_id(token) != self.sp.unk_id())


class HFTokenizer:
    def __init__(self, path: str):
        transformers = require("transformers", "llm", "the ctranslate2 backend's HF tokenizer")
        self.tok = transformers.AutoTokenizer.from_pretrained(path)

    def encode(self, text: str, src_code: str | None) -> list[str]:
        if src_code:
            self.tok.src_lang = src_code  # NLLB's tokenizer puts the source code first itself
        tokens: list[str] = self.tok.convert_ids_to_tokens(self.tok.encode(text))
        return tokens

    def decode(self, tokens: list[str]) -> str:
        text: str = self.tok.decode(self.tok.convert_tokens_to_ids(tokens), skip_special_tokens=True)
        return text

    def ids(self, tokens: list[str]) -> list[int]:
        ids: list[int] = self.tok.convert_tokens_to_ids(tokens)
        return ids

    def knows(self, token: str) -> bool:
        return bool(self.tok.convert_tokens_to_ids(token) != self.tok.unk_token_id)


class CTranslate2Translator(TranslationEngine):
    config: CT2Config

    def __init__(self, config: CT2Config):
        super().__init__(config)
        self.translator: Any = None
        self.tokenizer: SentencePieceTokenizer | HFTokenizer | None = None
        self._checked: set[tuple[str, str]] = set()

    @property
    def model_identity(self) -> str:
        return self.config.identity()

    def provenance(self) -> dict[str, str | None]:
        return {"model": f"ctranslate2:{self.model_identity.split('|')[0]}", "prompt": None,
                "gen_params": json.dumps(self.config.decoding_params(), sort_keys=True)}

    def load(self) -> None:
        ctranslate2 = require("ctranslate2", "mt", "the ctranslate2 translation backend")
        cfg = self.config
        model = Path(cfg.model)
        if not (model / "model.bin").exists():
            raise FileNotFoundError(f"{model} is not a CTranslate2 model folder (no model.bin); convert a "
                                    f"checkpoint with ct2-transformers-converter (docs/translation.md)")
        self.tokenizer = self._load_tokenizer(model)
        self.translator = ctranslate2.Translator(str(model), device=cfg.device, device_index=cfg.device_index,
                                                 compute_type=cfg.compute_type, inter_threads=cfg.inter_threads,
                                                 intra_threads=cfg.intra_threads)

    def _load_tokenizer(self, model: Path) -> SentencePieceTokenizer | HFTokenizer:
        cfg = self.config
        path = Path(cfg.tokenizer_path) if cfg.tokenizer_path else model
        spm_file = path if path.is_file() else next((path / f for f in SPM_FILES if (path / f).exists()), None)
        if cfg.tokenizer == "sentencepiece" or (cfg.tokenizer == "auto" and spm_file is not None):
            if spm_file is None:
                raise FileNotFoundError(f"no SentencePiece model ({', '.join(SPM_FILES)}) in {path}")
            return SentencePieceTokenizer(str(spm_file))
        return HFTokenizer(str(path))

    def length(self, segment: str) -> int:
        assert self.tokenizer is not None
        return len(self.tokenizer.encode(segment, None))

    def encode(self, segments: list[str], src: str, tgt: str) -> tuple[list[list[str]], list[list[str]] | None]:
        """Source tokens (length-guarded) and target prefixes, exactly as handed to translate_batch."""
        assert self.tokenizer is not None
        if self.config.family == "madlad":
            tag = madlad_tag(tgt)
            sources = [self.tokenizer.encode(f"{tag} {s}", None) for s in segments]
            prefixes = None
        else:
            sources = [self.tokenizer.encode(s, nllb_code(src)) for s in segments]
            prefixes = [[nllb_code(tgt)] for _ in segments]
        limit = self.config.max_input_tokens
        for i, toks in enumerate(sources):
            if len(toks) > limit:
                self.stats.truncated += 1
                sources[i] = toks[:limit - 1] + [toks[-1]]
        return sources, prefixes

    def model_codes(self, src: str, tgt: str) -> dict[str, str]:
        """ISO code -> the token this model needs for it (`<2th>` or `tha_Thai`)."""
        if self.config.family == "madlad":
            return {tgt: madlad_tag(tgt)}
        return {src: nllb_code(src), tgt: nllb_code(tgt)}

    def missing_codes(self, src: str, tgt: str) -> dict[str, str]:
        """The language tokens the model's vocabulary lacks (a language it was not trained on)."""
        assert self.tokenizer is not None
        return {code: tok for code, tok in self.model_codes(src, tgt).items() if not self.tokenizer.knows(tok)}

    def translate_segments(self, segments: list[str], src: str, tgt: str) -> list[str]:
        assert self.tokenizer is not None
        cfg = self.config
        if (src, tgt) not in self._checked:
            missing = self.missing_codes(src, tgt)
            if missing:
                raise LanguageError(f"{cfg.family} model {self.model_identity.split('|')[0]} lacks language "
                                    f"code(s) {', '.join(f'{c} ({t})' for c, t in missing.items())}; use an LLM "
                                    f"translator (backend: llm or openai) for them")
            self._checked.add((src, tgt))
        sources, prefixes = self.encode(segments, src, tgt)
        results = self.translator.translate_batch(
            sources, target_prefix=prefixes, beam_size=cfg.beam_size, max_batch_size=len(sources),
            max_input_length=cfg.max_input_tokens, max_decoding_length=cfg.max_decoding_length,
            repetition_penalty=cfg.repetition_penalty, no_repeat_ngram_size=cfg.no_repeat_ngram_size)
        skip = 1 if prefixes is not None else 0
        return [self.tokenizer.decode(r.hypotheses[0][skip:]) for r in results]
