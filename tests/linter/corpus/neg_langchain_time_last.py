# expect: none
from datetime import datetime
from langchain_core.prompts import PromptTemplate

prompt = PromptTemplate.from_template("You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates.\nQuestion: {question}\nCurrent time: {now}")
prompt = prompt.partial(now=lambda: datetime.now().isoformat())
