"""Tools: decorators, framework tool objects, argument schemas, manual loops
(``toolguard.tools``)."""
