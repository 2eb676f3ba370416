"""What the assets show on their Dagster pages: metadata shaped from the stages' results, nothing computed.

``long_values`` keeps long texts and links readable on the asset page, ``tables`` formats a batch's figures,
``rounds`` holds what both loops show alike, ``structure`` and ``proficiency`` what each loop's steps show.
"""
