# expect: none
from langchain_core.prompts import PromptTemplate

prompt = PromptTemplate.from_template("Query: {query}\nContext:\n{context}\nAnswer:")
