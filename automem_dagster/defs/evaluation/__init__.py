"""Fixed-seed evaluation of a candidate against the champion, and the gate on its result."""
