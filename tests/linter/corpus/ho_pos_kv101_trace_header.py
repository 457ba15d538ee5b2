# expect: KV101
import uuid
import anthropic

SYSTEM = ("You are an SRE assistant. Read the incident timeline and propose the three most likely "
          "root causes, each with one command that would confirm or rule it out. Prefer read-only commands, "
          "say which dashboard or log query shows the evidence, and end with the first mitigation to try. "
          "Mark anything you are unsure of, and never suggest restarting a database without a backup.")


class Assistant:
    def __init__(self):
        self.client = anthropic.Anthropic()

    def ask(self, timeline: str) -> str:
        trace_id = uuid.uuid4().hex[:8]
        msg = self.client.messages.create(
            model="claude-3-5-sonnet-latest",
            max_tokens=800,
            system=f"[trace {trace_id}]\n{SYSTEM}",
            messages=[{"role": "user", "content": timeline}],
        )
        return msg.content[0].text
