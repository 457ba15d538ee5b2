# expect: none
from datetime import datetime, timezone
from openai import OpenAI

SYSTEM = ("You schedule meetings. Propose two slots within working hours in the user's timezone and "
          "never double-book. Output JSON with keys start and end.")


def schedule(client: OpenAI, request: str, tz_name: str):
    now = datetime.now(timezone.utc).isoformat()
    return client.chat.completions.create(model="gpt-4o", messages=[
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Now (UTC): {now}. Timezone: {tz_name}.\n{request}"}])
