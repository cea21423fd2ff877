"""Documents for rank-agreement tests of the precision paths (one relevant to insulin)."""

DOCS = [
    "Cats are small domesticated carnivorous mammals.",
    "Dogs were domesticated from wolves long ago, probably more than fifteen thousand years.",
    "ATP",
    "Plants turn light into chemical energy in their chloroplasts through photosynthesis.",
    "Insulin regulates blood glucose.",
    "Mitochondria produce ATP for the cell.",
    "Vaccines train the immune system against viruses and bacteria.",
    "bone calcium density",
]
