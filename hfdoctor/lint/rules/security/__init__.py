"""Rules about code that could run when the model is loaded (SEC):

- pickles: the pickle scans and other model formats (SEC001, SEC003-SEC009);
- auto_map: remote code an auto_map loads (SEC002).

Nothing here unpickles, imports or runs anything from the checked repository.
"""

from __future__ import annotations

from hfdoctor.lint.rules.base import Rule
from hfdoctor.lint.rules.security.auto_map import remote_code
from hfdoctor.lint.rules.security.pickles import (embedded_pickle, not_a_pickle, pickle_not_proven_safe,
                                                  pickle_training_state, pickle_unscannable, unsafe_model_file,
                                                  unsafe_pickle, unsafe_pickle_in_history)

RULES: list[Rule] = [unsafe_pickle, remote_code, unsafe_model_file, pickle_training_state, embedded_pickle,
                     pickle_not_proven_safe, pickle_unscannable, not_a_pickle, unsafe_pickle_in_history]
