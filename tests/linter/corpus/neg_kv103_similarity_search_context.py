# expect: none
from openai import OpenAI


def answer(client: OpenAI, store, question: str) -> str:
    hits = store.similarity_search(question, k=4)
    context = "\n\n".join(h.page_content for h in hits)
    prompt = f"Question: {question}\n\nContext:\n{context}"
    out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
    return out.choices[0].message.content
