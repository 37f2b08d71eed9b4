"""The conversation corpus: the shapes of chat a template must render.

Every string in it is a needle: distinctive text that can be searched for in the
rendered output, so that analysis can tell which parts of a conversation a template
keeps (system prompt, tool definitions, tool-call arguments, tool results, typed
content parts, reasoning). No needle looks like a marker (`<...>`, `[...]`), so every
marker found in a rendering comes from the template itself.

Tool-call ids are 9 alphanumeric characters, because Mistral's templates refuse others.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Iterator

# Needles: one distinctive word per part of a conversation.
SYSTEM_NEEDLE = "sysneedle4c1e"
USER_NEEDLE = "userneedle1"
REPLY_NEEDLE = "replyneedle1"
THINK_NEEDLE = "thinkneedle1"
FINAL_NEEDLE = "finalneedle"
TOOL_NEEDLE = "toolneedle"
RESULT_NEEDLE = "resultneedle"
TYPED_NEEDLE = "typedneedle"

# Every needle, for readable(): "today? userneedle1<|im_end|>" reads "today?<|im_end|>".
NEEDLES = (SYSTEM_NEEDLE, "userneedle2", USER_NEEDLE, "replyneedle2", REPLY_NEEDLE, "thinkneedle2", THINK_NEEDLE,
           FINAL_NEEDLE, TOOL_NEEDLE, RESULT_NEEDLE, TYPED_NEEDLE, "docneedle")

SYSTEM = f"You are a careful assistant. {SYSTEM_NEEDLE}"
USER_1 = f"What is the weather like today? {USER_NEEDLE}"
ASSISTANT_1 = f"It is sunny today. {REPLY_NEEDLE}"
REASONING_1 = f"The user wants today's weather. {THINK_NEEDLE}"
USER_2 = "And tomorrow? userneedle2"
ASSISTANT_2 = "Tomorrow brings rain. replyneedle2"
REASONING_2 = "The forecast says rain. thinkneedle2"
FINAL_REPLY = f"It is 22 degrees and sunny. {FINAL_NEEDLE}"
TOOL_DESCRIPTION = f"Get the current weather in a city. {TOOL_NEEDLE}"
TOOL_NAME = "get_weather"
# The argument value appears nowhere else, so finding it means the tool call was rendered.
ARGUMENT_VALUE = "Lyon"
TOOL_RESULT = f"22 degrees, sunny. {RESULT_NEEDLE}"
TYPED_TEXT = f"Describe the weather. {TYPED_NEEDLE}"
DOCUMENT_TEXT = "Weather reports for the region. docneedle"

def readable(text: str) -> str:
    """A render as a message quotes it: without the needles (and the space before each)."""
    for needle in NEEDLES:
        if needle in text:
            text = text.replace(" " + needle, "").replace(needle, "")
    return text


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": TOOL_DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a timezone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "IANA timezone"}},
            "required": ["timezone"],
        },
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]
ARGUMENTS = {"city": ARGUMENT_VALUE}


def _tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str, reasoning: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


SYSTEM_MESSAGE = {"role": "system", "content": SYSTEM}
TOOL_CALL_OBJECT = {"role": "assistant", "content": "", "tool_calls": [_tool_call("call00001", TOOL_NAME, ARGUMENTS)]}
TOOL_CALL_STRING = {"role": "assistant", "content": "",
                    "tool_calls": [_tool_call("call00001", TOOL_NAME, json.dumps(ARGUMENTS))]}
# OpenAI clients send content: null beside tool_calls; apply_chat_template drops the key.
TOOL_CALL_NULL_CONTENT = {"role": "assistant", "content": None,
                          "tool_calls": [_tool_call("call00001", TOOL_NAME, ARGUMENTS)]}
TOOL_RESPONSE = {"role": "tool", "tool_call_id": "call00001", "name": TOOL_NAME, "content": TOOL_RESULT}
PARALLEL_CALLS = {
    "role": "assistant",
    "content": "Let me check both.",
    "tool_calls": [
        _tool_call("call00001", TOOL_NAME, ARGUMENTS),
        _tool_call("call00002", "get_time", {"timezone": "Europe/Paris"}),
    ],
}
TIME_RESPONSE = {"role": "tool", "tool_call_id": "call00002", "name": "get_time", "content": "14:05"}


@dataclass(frozen=True)
class Conversation:
    name: str
    what: str  # the shape, as findings name it ("two user turns")
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] | None = None
    documents: tuple[dict[str, Any], ...] | None = None
    # Core shapes every chat server sees; the others are optional features.
    core: bool = False

    def inputs(self) -> dict[str, Any]:
        """Fresh, mutable copies of the inputs apply_chat_template takes."""
        return {
            "messages": copy.deepcopy(list(self.messages)),
            "tools": copy.deepcopy(list(self.tools)) if self.tools is not None else None,
            "documents": copy.deepcopy(list(self.documents)) if self.documents is not None else None,
        }


def _conv(name: str, what: str, *messages: dict[str, Any], tools: Any = None, documents: Any = None,
          core: bool = False) -> Conversation:
    return Conversation(name, what, tuple(messages),
                        tuple(tools) if tools is not None else None,
                        tuple(documents) if documents is not None else None, core)


# Only the conversations about system prompts carry one: some templates decline a
# system role on purpose (Mistral v0.2, Gemma), and that must not hide what they do
# with tools or reasoning.
CORPUS: tuple[Conversation, ...] = (
    _conv("user", "a single user message", _user(USER_1), core=True),
    _conv("system_user", "a system prompt and a user message", SYSTEM_MESSAGE, _user(USER_1), core=True),
    _conv("reply", "a user message and a reply", _user(USER_1), _assistant(ASSISTANT_1), core=True),
    _conv("multi_turn", "two user turns", _user(USER_1), _assistant(ASSISTANT_1), _user(USER_2), core=True),
    _conv("multi_turn_reply", "two complete turns",
          _user(USER_1), _assistant(ASSISTANT_1), _user(USER_2), _assistant(ASSISTANT_2), core=True),
    _conv("system_multi_turn", "a system prompt and two user turns",
          SYSTEM_MESSAGE, _user(USER_1), _assistant(ASSISTANT_1), _user(USER_2), core=True),
    _conv("reasoning_reply", "a reply with reasoning_content", _user(USER_1), _assistant(ASSISTANT_1, REASONING_1)),
    _conv("reasoning_history", "reasoning in an earlier turn",
          _user(USER_1), _assistant(ASSISTANT_1, REASONING_1), _user(USER_2)),
    _conv("reasoning_aliases", "reasoning passed as `thinking` and `reasoning`",
          _user(USER_1), {"role": "assistant", "content": ASSISTANT_1, "thinking": REASONING_1},
          _user(USER_2), {"role": "assistant", "content": ASSISTANT_2, "reasoning": REASONING_2}),
    _conv("tools_available", "tool definitions", _user(USER_1), tools=TOOLS),
    _conv("tool_call", "an assistant tool call", _user(USER_1), TOOL_CALL_OBJECT, tools=TOOLS),
    _conv("tool_result", "a tool call and its result", _user(USER_1), TOOL_CALL_OBJECT, TOOL_RESPONSE, tools=TOOLS),
    _conv("tool_result_reply", "a tool call, its result and the final reply",
          _user(USER_1), TOOL_CALL_OBJECT, TOOL_RESPONSE, _assistant(FINAL_REPLY), tools=TOOLS),
    _conv("tool_call_string_args", "a tool call whose arguments are a JSON string",
          _user(USER_1), TOOL_CALL_STRING, TOOL_RESPONSE, tools=TOOLS),
    _conv("tool_call_null_content", "a tool call with content null (as OpenAI clients send it)",
          _user(USER_1), TOOL_CALL_NULL_CONTENT, TOOL_RESPONSE, tools=TOOLS),
    _conv("parallel_tool_calls", "two parallel tool calls and their results",
          _user(USER_1), PARALLEL_CALLS, TOOL_RESPONSE, TIME_RESPONSE, _assistant(FINAL_REPLY), tools=TOOLS),
    _conv("typed_content", "typed content parts",
          {"role": "user", "content": [{"type": "text", "text": TYPED_TEXT}, {"type": "text", "text": USER_1}]},
          {"role": "assistant", "content": [{"type": "text", "text": ASSISTANT_1}]},
          {"role": "user", "content": [{"type": "text", "text": USER_2}]}),
    _conv("typed_system", "a system prompt as typed content parts",
          {"role": "system", "content": [{"type": "text", "text": SYSTEM}]}, _user(USER_1)),
    _conv("none_values", "messages with null-valued keys",
          _user(USER_1), {"role": "assistant", "content": ASSISTANT_1, "tool_calls": None, "reasoning_content": None},
          _user(USER_2)),
    _conv("documents", "retrieval documents", _user(USER_1), documents=[{"title": "Weather report", "text": DOCUMENT_TEXT}]),
)
BY_NAME = {c.name: c for c in CORPUS}

# enable_thinking absent, on and off: the three ways clients call hybrid-thinking models.
THINKING_VARIANTS: tuple[dict[str, Any], ...] = ({}, {"enable_thinking": True}, {"enable_thinking": False})


def conversation(name: str) -> Conversation:
    return BY_NAME[name]


def variants() -> Iterator[tuple[Conversation, bool, dict[str, Any]]]:
    """(conversation, add_generation_prompt, kwargs) over the whole corpus."""
    for conv in CORPUS:
        for add_generation_prompt in (False, True):
            for kwargs in THINKING_VARIANTS:
                yield conv, add_generation_prompt, dict(kwargs)


@dataclass(frozen=True)
class Continuation:
    """A served turn and the next request (prompt-cache reuse).

    A server's cache after a turn holds the generation prompt and what the model wrote
    (its reasoning, then `output`); the next request renders that turn as history.
    """

    name: str
    what: str
    prompt: str  # corpus name, rendered with add_generation_prompt=True: what was served
    finished: str  # corpus name: the prompt's conversation with the model's turn, as training data shows it
    after: str  # corpus name: that conversation with the model's turn and one more message
    output: str  # a needle of what the model wrote, as the next request shows it
    reasoning: bool = False  # the model reasoned before writing `output`


CONTINUATIONS: tuple[Continuation, ...] = (
    Continuation("multi-turn", "a reply followed by the next user message", "user", "reply", "multi_turn",
                 ASSISTANT_1),
    Continuation("reasoning", "a reply with reasoning followed by the next user message",
                 "user", "reasoning_reply", "reasoning_history", ASSISTANT_1, reasoning=True),
    Continuation("tool-call", "a tool call followed by its result", "tools_available", "tool_call", "tool_result",
                 ARGUMENT_VALUE),
)


@dataclass(frozen=True)
class Completion:
    """A prompt and the reply that completes it (training data vs inference)."""

    name: str
    what: str
    prompt: str  # corpus name, rendered with add_generation_prompt=True
    full: str  # corpus name: prompt plus the assistant reply, rendered without it
    reply: str  # the reply text the model would generate


COMPLETIONS: tuple[Completion, ...] = (
    Completion("reply", "a plain reply", "user", "reply", ASSISTANT_1),
    Completion("second-turn", "the reply of a second turn", "multi_turn", "multi_turn_reply", ASSISTANT_2),
    Completion("after-tool", "the reply after a tool result", "tool_result", "tool_result_reply", FINAL_REPLY),
)
