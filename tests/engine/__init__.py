"""Guard and Task: the call path, the decision core, approvals, budgets, audit."""
