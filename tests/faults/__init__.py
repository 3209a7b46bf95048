"""The fault matrix (`make test-faults`)."""
