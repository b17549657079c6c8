mod php/resil.ini
