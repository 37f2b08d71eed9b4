"""Rules about the chat template, one module per what they protect.

- presence: TPL001 missing-chat-template, TPL002 chat-template-conflict;
- rendering: TPL003 syntax, TPL004 render errors, TPL005 markers that are not tokens;
- serving: TPL006 generation prompt, TPL007 double BOS, TPL008 thinking toggle, TPL009 kwargs;
- training: TPL010 prefix stability, TPL011 train/inference, TPL012 assistant masks;
- drift: TPL013 template-drift (against every template upstream published, when the trained one can be known);
- provenance: TPL014 template-backdoor (what the source does on purpose);
- portability: TPL015 template-portability (the template in other template engines);
- claims: TPL016 tool-support-mismatch (what the card promises about tools);
- system_prompt: TPL017 system-prompt-dropped (the caller's system message left out, silently).

common.py holds what they share (the analyses, locations in a template). These modules
import hfdoctor.chat, hfdoctor.lint.edits, lineage and the registry; never check or fix.
"""

from __future__ import annotations

from hfdoctor.lint.rules.template import (claims, drift, portability, presence, provenance, rendering, serving,
                                          system_prompt, training)

RULES = [*presence.RULES, *rendering.RULES, *serving.RULES, *training.RULES, *drift.RULES, *provenance.RULES, *portability.RULES,
         *claims.RULES, *system_prompt.RULES]
