"""Pure rules: text, tags, routing, stop rules, prompts, schedules, prices, files, cards.

No I/O and no ports: each module takes values and returns values (stdlib, `bot.core.models`
and `bot.core.errors` only, and one another), so each is tested with tables.
"""
