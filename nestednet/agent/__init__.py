"""GNAB agent: the process in every GNAB child that talks with the communication assistant.

Standard library only: this package is copied into the component image.
"""
