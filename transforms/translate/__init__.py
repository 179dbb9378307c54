"""Machine translation behind one interface (base.TranslationEngine): CTranslate2 (MADLAD-400, NLLB),
any LLM engine with a translation prompt, or an OpenAI-compatible endpoint; a per-segment cache;
TranslateStage for jobs; chrF/BLEU against the parallel corpora (quality.py). Nothing heavy is
imported here: backends load ctranslate2 / torch in setup(). See docs/translation.md."""
