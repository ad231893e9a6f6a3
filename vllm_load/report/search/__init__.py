"""What a tuning search writes at its end (issue 47): `page_model` the page's numbers (the search
path, the configurations as Pareto points and their frontier, the chosen one), `page` its HTML
with charts, `outputs` the JSON and Markdown beside it and all three written."""
