"""radixgate for LlamaIndex: static-first chat templates and tagged `OpenAILike` requests.

Install with ``pip install 'radixgate[llamaindex]'``. An existing query pipeline changes in its
imports::

    from radixgate.llamaindex import ChatPromptTemplate, OpenAILike   # was llama_index.core.prompts / .llms.openai_like

    QA = ChatPromptTemplate.from_messages([
        ("system", "Current time: {now}. You answer from ACME's handbook. " + POLICY),
        ("user", "Context:\\n{context_str}\\n\\nQuestion: {query_str}"),
    ])
    llm = OpenAILike(model="tiny", api_base="http://127.0.0.1:30000/v1", api_key="-", is_chat_model=True)
    engine = index.as_query_engine(llm=llm, text_qa_template=QA.partial_format(now=now()))
    engine.query(question)

`ChatPromptTemplate` renders its system messages static-first (the ``{now}`` sentence moves to the
end of the last user message; see `radixgate._integration`), names the template (the ``path:line``
of its construction unless ``template=`` says otherwise) and marks the rendered system message.
`OpenAILike` sends that metadata with the application's call site (the first frame outside
radixgate, LlamaIndex and LangChain) and OpenAI's ``prompt_cache_key``; prompts that are not
radixgate's are still tagged with their call site.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.prompts import ChatPromptTemplate as _ChatPromptTemplate
    from llama_index.llms.openai_like import OpenAILike as _OpenAILike
except ImportError as exc:  # the extra is not installed
    raise ImportError("radixgate.llamaindex needs LlamaIndex: pip install 'radixgate[llamaindex]'") from exc

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

__all__ = ["ChatPromptTemplate", "OpenAILike"]


class ChatPromptTemplate(_ChatPromptTemplate):
    """`llama_index.core.prompts.ChatPromptTemplate` that renders static-first and names itself.

    Extra keywords: ``template`` (the id in the gateway's statistics, kept as
    ``radixgate_template``), ``shared_variables`` (system-message variables many requests share:
    kept after the static text), ``static_variables`` (variables whose value never changes)."""

    radixgate_template: str = ""
    shared_variables: list[str] = []
    static_variables: list[str] = []

    def __init__(
        self,
        message_templates: Sequence[ChatMessage],
        *,
        template: str | None = None,
        shared_variables: Sequence[str] = (),
        static_variables: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(message_templates, **kwargs)
        site = application_site()
        self.radixgate_template = template or (site[0] if site else "<unknown>")
        self.shared_variables = list(shared_variables)
        self.static_variables = list(static_variables)

    def format_messages(self, llm: Any = None, **kwargs: Any) -> list[ChatMessage]:
        del llm  # unused, as in LlamaIndex's own template
        values = self._map_all_vars({**self.kwargs, **kwargs})
        system_templates: list[str] = []
        body: list[ChatMessage] = []
        for message in self.message_templates:
            if message.role == MessageRole.SYSTEM and isinstance(message.content, str):
                system_templates.append(message.content)
            else:
                body.append(message.format_vars(**values))
        split = split_system_templates(
            system_templates, values, shared=self.shared_variables, static=self.static_variables
        )
        metadata = tagged_prompt(split, self.radixgate_template).metadata(source="")
        metadata.pop("prompt_source")
        head = system_text(split)
        out = [ChatMessage(role=MessageRole.SYSTEM, content=head, additional_kwargs={MARKER: metadata})] if head else []
        if split.turn:
            users = [i for i, m in enumerate(body) if m.role == MessageRole.USER and isinstance(m.content, str)]
            if users:
                last = body[users[-1]]
                body[users[-1]] = ChatMessage(
                    role=last.role,
                    content=with_turn(str(last.content), split.turn),
                    additional_kwargs=last.additional_kwargs,
                )
            else:
                body.append(ChatMessage(role=MessageRole.USER, content=split.turn))
        if not head and body:  # nothing static: still mark the request
            body[0] = ChatMessage(
                role=body[0].role,
                blocks=body[0].blocks,
                additional_kwargs={**body[0].additional_kwargs, MARKER: metadata},
            )
        if self.output_parser is not None:
            return self.output_parser.format_messages(out + body)
        return out + body


class OpenAILike(_OpenAILike):
    """`llama_index.llms.openai_like.OpenAILike` whose chat requests carry radixgate's ``metadata``
    (template, call site, static-prefix hash) and OpenAI's ``prompt_cache_key``.

    ``radixgate_metadata`` (default: on unless ``api_base`` is OpenAI's, which rejects ``metadata``
    on requests it does not store) turns the metadata off or on."""

    radixgate_metadata: bool | None = None

    def _tags(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> dict[str, Any]:
        first_system = next((str(m.content) for m in messages if m.role == MessageRole.SYSTEM), None)
        metadata, cache_key = request_fields([m.additional_kwargs for m in messages], first_system, application_site())
        send = self.radixgate_metadata if self.radixgate_metadata is not None else sends_metadata(self.api_base)
        extra: dict[str, Any] = {}
        if send:
            extra["metadata"] = {**metadata, **(kwargs.get("metadata") or {})}
        if cache_key:
            extra["prompt_cache_key"] = cache_key
        return {**kwargs, **extra} if self.is_chat_model else kwargs

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        return super().chat(messages, **self._tags(messages, kwargs))

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        return super().stream_chat(messages, **self._tags(messages, kwargs))

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        return await super().achat(messages, **self._tags(messages, kwargs))

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        return await super().astream_chat(messages, **self._tags(messages, kwargs))
