export declare const CHROMIUM: string;
export declare const CHROMIUM_MISSING: string;
export declare function chromiumInstalled(): boolean;
