"""The commands every surface offers: their declarations (`commands`) and the verbs behind
them (`admin`, `schedule_verbs`), acting on an engine."""
