"""radixgate for LangChain: static-first chat templates and tagged `ChatOpenAI` requests.

Install with ``pip install 'radixgate[langchain]'``. An existing chain changes in its imports::

    from radixgate.langchain import ChatOpenAI, ChatPromptTemplate   # was langchain_openai / langchain_core

    prompt = ChatPromptTemplate.from_messages([
        ("system", "Today is {now}. You are ACME's support agent. " + POLICY),
        MessagesPlaceholder("history"),
        ("human", "{question}"),
    ])
    chain = prompt | ChatOpenAI(model="tiny", base_url="http://127.0.0.1:30000/v1") | StrOutputParser()
    chain.invoke({"now": now(), "history": past, "question": question})

`ChatPromptTemplate` renders its system messages static-first (the sentence with ``{now}`` moves
to the end of the last human message; see `radixgate._integration`), names the template (the
``path:line`` of its construction unless ``template=`` says otherwise) and marks the rendered
system message with the request metadata. `ChatOpenAI` sends that metadata with the application's
call site (the first frame outside radixgate, LangChain and LlamaIndex, for ``invoke``,
``ainvoke``, ``stream`` and ``astream`` alike) and OpenAI's ``prompt_cache_key``.

Importing this module registers a LangChain callback hook that records, when a top-level run
starts, where the application started it: chains run their steps in tasks and threads whose
stacks no longer reach the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from typing import Any
from uuid import UUID

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
    from langchain_core.prompts import ChatPromptTemplate as _ChatPromptTemplate
    from langchain_core.prompts import PromptTemplate, SystemMessagePromptTemplate
    from langchain_core.prompts.chat import HumanMessagePromptTemplate
    from langchain_core.tracers.context import register_configure_hook
    from langchain_openai import ChatOpenAI as _ChatOpenAI
except ImportError as exc:  # the extra is not installed
    raise ImportError("radixgate.langchain needs LangChain: pip install 'radixgate[langchain]'") from exc
from pydantic import Field

from ._integration import (
    MARKER,
    application_site,
    request_fields,
    sends_metadata,
    split_system_templates,
    system_text,
    tagged_prompt,
    with_turn,
)

__all__ = ["ChatPromptTemplate", "ChatOpenAI", "CallSiteHandler"]

# Where the application started the current top-level run: set by `CallSiteHandler` in the
# caller's context, which the chain's steps copy.
_RUN_SITE: ContextVar[tuple[str, str] | None] = ContextVar("radixgate_langchain_run_site", default=None)


class CallSiteHandler(BaseCallbackHandler):
    """Records the application's call site when a top-level LangChain run starts.

    It runs inline (never in a thread pool or a task), so the stack still reaches the line that
    called ``invoke`` / ``ainvoke`` / ``stream`` / ``astream``."""

    run_inline = True
    raise_error = False

    def _root(self, parent_run_id: UUID | None) -> None:
        if parent_run_id is None:
            _RUN_SITE.set(application_site())

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._root(parent_run_id)

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._root(parent_run_id)

    def on_llm_start(
        self, serialized: Any, prompts: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._root(parent_run_id)


# One stateless handler for every run of the process: a default, not a per-context value.
_HANDLER: ContextVar[CallSiteHandler | None] = ContextVar(
    "radixgate_langchain_handler",
    default=CallSiteHandler(),  # noqa: B039
)
register_configure_hook(_HANDLER, inheritable=True)


def _system_template(message: Any) -> str | None:
    """The f-string template of a system message (literal text escaped), or None if not one."""
    if isinstance(message, SystemMessage) and isinstance(message.content, str):
        return message.content.replace("{", "{{").replace("}", "}}")
    if (
        isinstance(message, SystemMessagePromptTemplate)
        and isinstance(message.prompt, PromptTemplate)
        and message.prompt.template_format == "f-string"
    ):
        return message.prompt.template
    return None


class ChatPromptTemplate(_ChatPromptTemplate):
    """`langchain_core.prompts.ChatPromptTemplate` that renders static-first and names itself.

    Extra keywords (constructor and ``from_messages``): ``template`` (the id in the gateway's
    statistics, kept as ``radixgate_template``), ``shared_variables`` (variables of the system
    messages that many requests share, such as retrieved documents: kept after the static text),
    ``static_variables`` (variables whose value never changes: kept in the static text)."""

    radixgate_template: str = ""
    shared_variables: list[str] = Field(default_factory=list)
    static_variables: list[str] = Field(default_factory=list)

    def __init__(self, messages: Sequence[Any], *, template: str | None = None, **kwargs: Any) -> None:
        if template:
            kwargs["radixgate_template"] = template
        elif not kwargs.get("radixgate_template"):
            site = application_site()
            kwargs["radixgate_template"] = site[0] if site else "<unknown>"
        super().__init__(messages, **kwargs)

    @classmethod
    def from_messages(
        cls,
        messages: Sequence[Any],
        template_format: Any = "f-string",
        *,
        template: str | None = None,
        shared_variables: Iterable[str] = (),
        static_variables: Iterable[str] = (),
    ) -> ChatPromptTemplate:
        return cls(
            messages,
            template_format=template_format,
            template=template,
            shared_variables=list(shared_variables),
            static_variables=list(static_variables),
        )

    def format_messages(self, **kwargs: Any) -> list[BaseMessage]:
        values = self._merge_partial_and_user_variables(**kwargs)
        system_templates: list[str] = []
        body: list[BaseMessage] = []
        last_human = -1
        for message in self.messages:
            text = _system_template(message)
            if text is not None:
                system_templates.append(text)
            elif isinstance(message, BaseMessage):
                body.append(message)
            else:
                body.extend(message.format_messages(**values))
                if isinstance(message, HumanMessagePromptTemplate):
                    last_human = len(body) - 1
        split = split_system_templates(
            system_templates, values, shared=self.shared_variables, static=self.static_variables
        )
        metadata = tagged_prompt(split, self.radixgate_template).metadata(source="")
        metadata.pop("prompt_source")
        head = system_text(split)
        out: list[BaseMessage] = [SystemMessage(head, additional_kwargs={MARKER: metadata})] if head else []
        if split.turn:
            if last_human < 0:
                last_human = max((i for i, m in enumerate(body) if isinstance(m, HumanMessage)), default=-1)
            if last_human >= 0 and isinstance(body[last_human].content, str):
                old = body[last_human]
                body[last_human] = old.model_copy(update={"content": with_turn(str(old.content), split.turn)})
            else:
                body.append(HumanMessage(split.turn))
        if not head and body:  # nothing static: still mark the request
            body[0] = body[0].model_copy(update={"additional_kwargs": {**body[0].additional_kwargs, MARKER: metadata}})
        return out + body

    async def aformat_messages(self, **kwargs: Any) -> list[BaseMessage]:
        return self.format_messages(**kwargs)


class ChatOpenAI(_ChatOpenAI):
    """`langchain_openai.ChatOpenAI` whose requests carry radixgate's ``metadata`` (template,
    call site, static-prefix hash) and OpenAI's ``prompt_cache_key`` (the static-prefix hash).

    ``radixgate_metadata`` (default: on unless the base URL is OpenAI's, which rejects
    ``metadata`` on requests it does not store) turns the metadata off or on."""

    radixgate_metadata: bool | None = None

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict:
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        messages = self._convert_input(input_).to_messages()
        first_system = next((m.text for m in messages if isinstance(m, SystemMessage)), None)
        site = _RUN_SITE.get() or application_site()
        metadata, cache_key = request_fields([m.additional_kwargs for m in messages], first_system, site)
        send = self.radixgate_metadata if self.radixgate_metadata is not None else sends_metadata(self.openai_api_base)
        if send:
            payload["metadata"] = {**metadata, **(payload.get("metadata") or {})}
        if cache_key:
            payload.setdefault("prompt_cache_key", cache_key)
        return payload
