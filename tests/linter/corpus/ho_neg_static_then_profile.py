# expect: none
from openai import OpenAI

RULES = ("You are a travel planner. Suggest at most three options, each with a price range and the "
         "best season to go. Ask a clarifying question when the budget is missing.")


def plan(client: OpenAI, user_profile: dict, request_text: str):
    profile = f"Traveller: {user_profile['name']}, home airport {user_profile['airport']}"
    return client.chat.completions.create(model="gpt-4o", messages=[
        {"role": "system", "content": RULES},
        {"role": "user", "content": profile + "\n\n" + request_text}])
