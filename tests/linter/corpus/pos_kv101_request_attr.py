# expect: KV101
from openai import AsyncOpenAI

client = AsyncOpenAI()

async def handle(request):
    return await client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": f"Session {request.session_id}\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates."},
        {"role": "user", "content": request.text}])
