"""What the runtime and the verbs ask for, over the store and model ports: the prompt's
window of the thread, the selector, rolling summaries, episode tasks, memory notes,
catch-up reading, spending. Each takes the store roles it reads (`bot.core.ports`)."""
