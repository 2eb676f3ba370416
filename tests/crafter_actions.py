"""A three-action Crafter vocabulary with descriptions, for the memory baselines' tests."""


CRAFTER = {"noop": "nothing", "move_north": "go north", "do": "interact"}
