# expect: none
import anthropic

client = anthropic.Anthropic()
MANUAL = open("manual.md").read()


def ask(question: str, user_id: str):
    return client.messages.create(
        model="claude-3-5-sonnet-latest", max_tokens=500,
        system=[{"type": "text", "text": "You answer questions about the product manual."},
                {"type": "text", "text": MANUAL, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": f"(user {user_id}) {question}"}])
