"""Whether a folder holds its whole vocabulary.

Rules that call a token or an id unknown need the whole vocabulary to say so. A folder may commit
only part of it: added_tokens.json and tokenizer_config.json's added_tokens_decoder list the tokens
added past the base vocabulary, while the base (vocab.json, tokenizer.json, or a GGUF's) is left
out (a Whisper fine-tune with added_tokens.json alone; a Granite folder without vocab.json). A
token missing from such a part says nothing about the vocabulary the model was trained with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hfdoctor.repo import ModelRepo


def has_whole_vocabulary(repo: "ModelRepo") -> bool:
    """tokenizer.json, vocab.json or a GGUF's tokenizer is here: not just added tokens.

    A Whisper fine-tune that commits added_tokens.json (ids 50258 and up) without vocab.json
    still stops on 50257, a token of the vocabulary the folder left out.
    """
    return (repo.gguf_tokenizer is not None or repo.tokenizer_json is not None
            or isinstance(repo.json_object("vocab.json"), dict))
