"""Self-RAG control blocks (blocks): router, relevance grader, hallucination check and query
rewriter, deciding by seeded functions of the query."""
