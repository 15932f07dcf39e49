"""Pure core: queues, assignment policy, health rules. No Pyro5, no threads, no files."""
