// Inline SVG icons (no icon font: works with any system font, keeps the bundle small).
const base = { width: 14, height: 14, viewBox: '0 0 24 24', fill: 'none', stroke: 'currentColor', strokeWidth: 2, strokeLinecap: 'round' as const, strokeLinejoin: 'round' as const, 'aria-hidden': true };

export const CopyIcon = () => (
  <svg {...base}><rect x="9" y="9" width="12" height="12" rx="2" /><path d="M5 15H4a1 1 0 0 1-1-1V4a1 1 0 0 1 1-1h10a1 1 0 0 1 1 1v1" /></svg>
);
export const CheckIcon = () => (<svg {...base}><path d="M5 12l5 5L20 7" /></svg>);
export const FilterIcon = () => (<svg {...base}><path d="M4 4h16l-6 8v6l-4 2v-8z" /></svg>);
export const InfoIcon = () => (<svg {...base}><circle cx="12" cy="12" r="9" /><path d="M12 8h.01M11 12h1v4h1" /></svg>);
export const AlertIcon = () => (<svg {...base}><path d="M12 3l10 18H2z" /><path d="M12 10v4M12 18h.01" /></svg>);
export const JsonIcon = () => (<svg {...base}><path d="M8 4H7a2 2 0 0 0-2 2v4l-2 2 2 2v4a2 2 0 0 0 2 2h1M16 4h1a2 2 0 0 1 2 2v4l2 2-2 2v4a2 2 0 0 1-2 2h-1" /></svg>);
export const TracesIcon = () => (<svg {...base}><path d="M4 6h10M8 12h12M6 18h8" /></svg>);
export const CloseIcon = () => (<svg {...base}><path d="M6 6l12 12M18 6L6 18" /></svg>);
export const ChatIcon = () => (<svg {...base}><path d="M4 5h16v10H9l-5 4z" /><path d="M8 9h8M8 12h5" /></svg>);
export const DownloadIcon = () => (<svg {...base}><path d="M12 4v11M7 10l5 5 5-5M5 20h14" /></svg>);
