"""`sepo analyze`: equilibrium analysis of normal-form games, play histories, dynamics and populations."""
import typer

app = typer.Typer(help="Equilibrium analysis: games, regret, learning dynamics, collusion stress tests, populations.", no_args_is_help=True)
