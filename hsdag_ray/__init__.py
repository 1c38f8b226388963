"""hsdag_ray: learned device placement of OpenVINO computation graphs (HSDAG) on Ray."""
__version__ = "0.1.0"
